package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// BuildRequests assembles the request each claimed task carries: the
// resource, its children for a composer (observed) or rollup (descendants),
// an operate task's verb and input (its op is marked running, the attempt
// counted), and the effective provider config (the kind default deep-merged with the
// resource's own override; the override's bundle replaces the default's).
//
// A react task carries the watched resource (its snapshot if the resource
// was hard-deleted), the transition, a dedup token stable across
// redeliveries, and the reactor kind's default config: the watched
// resource's override configures the watched kind, not the reactor.
//
// failed is parallel to tasks: a task that gets no request has its reason
// there — its resource vanished since the claim, or its effective config
// cannot be built (a stored override that is not a JSON object) — and only
// that task fails: one bad row must not hold back the batch it was claimed
// with. The error is for the batch as a whole (the database).
func (s *Store) BuildRequests(ctx context.Context, tasks []model.Task) (envs []webhooksdk.Envelope, failed []error, err error) {
	return s.buildRequests(ctx, tasks, true)
}

// buildRequests is BuildRequests; start false reads an operate task's
// operation without marking it running or counting an attempt, for a
// request built again under the same claim (TaskPayload).
func (s *Store) buildRequests(ctx context.Context, tasks []model.Task, start bool) (envs []webhooksdk.Envelope, failed []error, err error) {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ResourceID
	}
	rows, err := s.pool.Query(ctx, `SELECT `+resourceCols+` FROM resources r WHERE r.id = ANY ($1)`, uuidArray(ids))
	if err != nil {
		return nil, nil, fmt.Errorf("load task resources: %w", err)
	}
	res, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Resource, error) { return scanResource(r) })
	if err != nil {
		return nil, nil, fmt.Errorf("load task resources: %w", err)
	}
	byID := make(map[string]model.Resource, len(res))
	for _, r := range res {
		byID[r.ID] = r
	}
	var (
		parents []string
		pairs   []string
		refs    []string
		reacts  []string
	)
	seenPair := map[string]bool{}
	// Each task's "kind/version" key, built once: it is looked up again for
	// the task's default config below.
	pairOf := make([]string, len(tasks))
	for i, t := range tasks {
		if t.Type == webhooksdk.TaskReact {
			reacts = append(reacts, t.ID)
		} else if r := byID[t.ResourceID]; r.ProviderConfigRef != "" {
			refs = append(refs, r.ProviderConfigRef)
		}
		if needsChildren(t) {
			parents = append(parents, t.ResourceID)
		}
		p := t.Kind + "/" + strconv.Itoa(t.KindVersion)
		pairOf[i] = p
		if !seenPair[p] {
			seenPair[p] = true
			pairs = append(pairs, p)
		}
	}
	snapshots, err := s.reactSnapshots(ctx, reacts)
	if err != nil {
		return nil, nil, err
	}
	children := map[string][]model.Resource{}
	if len(parents) > 0 {
		rows, err := s.pool.Query(ctx, `SELECT `+resourceCols+` FROM resources r
			WHERE r.owner_id = ANY ($1) AND (r.frozen_until IS NULL OR r.frozen_until <> 'infinity')
			ORDER BY r.kind, r.name`, parents)
		if err != nil {
			return nil, nil, fmt.Errorf("load children: %w", err)
		}
		kids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Resource, error) { return scanResource(r) })
		if err != nil {
			return nil, nil, fmt.Errorf("load children: %w", err)
		}
		for _, k := range kids {
			children[k.OwnerID] = append(children[k.OwnerID], k)
		}
	}
	defaults := map[string]cfg{}
	overrides := map[string]cfg{}
	// BuildRequests runs on every claimed batch: the configs are read by
	// hand straight into the two maps rather than collected into a slice
	// first.
	rows, err = s.pool.Query(ctx, `SELECT name, kind || '/' || kind_version, is_default, spec, data FROM providerconfigs
		WHERE (is_default AND kind || '/' || kind_version = ANY ($1)) OR name = ANY ($2)`, pairs, refs)
	if err != nil {
		return nil, nil, fmt.Errorf("load provider configs: %w", err)
	}
	for rows.Next() {
		var (
			name, pair string
			def        bool
			c          cfg
		)
		if err := rows.Scan(&name, &pair, &def, &c.spec, &c.data); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("load provider configs: %w", err)
		}
		if def {
			defaults[pair] = c
		}
		overrides[name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("load provider configs: %w", err)
	}

	ops, err := s.operationsOf(ctx, tasks, start)
	if err != nil {
		return nil, nil, err
	}

	out := make([]webhooksdk.Envelope, len(tasks))
	failed = make([]error, len(tasks))
	for i, t := range tasks {
		if t.Type == webhooksdk.TaskReact {
			out[i], failed[i] = reactRequest(t, byID, snapshots, defaults[pairOf[i]])
			continue
		}
		r, found := byID[t.ResourceID]
		if !found {
			failed[i] = ErrResourceVanished
			continue
		}
		req := webhooksdk.Envelope{
			TaskID: t.ID, ClaimEpoch: t.Epoch, Attempt: t.Attempts + 1, TaskType: t.Type,
			Reaction: t.Reaction, Trigger: t.Trigger, Kind: t.Kind, KindVersion: t.KindVersion,
			Resource: &r.Resource, Status: r.Status,
		}
		if t.Trigger == webhooksdk.TriggerOperation {
			op, found := ops[t.ID]
			if !found {
				failed[i] = ErrOperationGone
				continue
			}
			req.Operation = &webhooksdk.Operation{Verb: op.Verb, Input: op.Input}
		}
		if !t.Deadline.IsZero() {
			d := t.Deadline.UTC().Truncate(time.Millisecond)
			req.Deadline = d
		}
		if needsChildren(t) {
			if t.Trigger == webhooksdk.TriggerChildrenSettled {
				// A child orphaned by the composer is ignored while in its
				// grace window, and one being torn down is on its way out:
				// neither counts toward nor degrades the rollup (the
				// composer still observes both, to re-adopt an orphan).
				for _, c := range children[t.ResourceID] {
					if ph := c.PhaseOf(); ph != model.PhaseOrphaned && ph != model.PhaseDeleting {
						req.Descendants = append(req.Descendants, c.Resource)
					}
				}
			} else {
				req.Observed = model.WireResources(children[t.ResourceID])
			}
		}
		def := defaults[pairOf[i]]
		req.Config, req.Bundle = def.spec, def.data
		if r.ProviderConfigRef != "" {
			o := overrides[r.ProviderConfigRef]
			merged, err := webhooksdk.MergeConfig(def.spec, o.spec)
			if err != nil {
				failed[i] = fmt.Errorf("cannot build the effective provider config (provider config %s): %w", r.ProviderConfigRef, err)
				continue
			}
			req.Config = merged
			if len(o.data) > 0 {
				req.Bundle = o.data
			}
		}
		out[i] = req
	}
	return out, failed, nil
}

// ErrResourceVanished means the task's resource was deleted after the claim.
var ErrResourceVanished = errors.New("resource vanished")

// cfg is a provider config's spec and bundle.
type cfg struct {
	spec json.RawMessage
	data []byte
}

// reactSnapshots returns the snapshots of the react tasks ids whose
// resource was hard-deleted, by task ID.
func (s *Store) reactSnapshots(ctx context.Context, ids []string) (map[string]webhooksdk.Resource, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT task_id, snapshot FROM lifecycle_outbox
		WHERE task_id = ANY ($1) AND snapshot IS NOT NULL`, ids)
	if err != nil {
		return nil, fmt.Errorf("load reactor snapshots: %w", err)
	}
	out := map[string]webhooksdk.Resource{}
	for rows.Next() {
		var (
			id   string
			snap webhooksdk.Resource
		)
		if err := rows.Scan(&id, &snap); err != nil {
			rows.Close()
			return nil, fmt.Errorf("load reactor snapshots: %w", err)
		}
		out[id] = snap
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load reactor snapshots: %w", err)
	}
	return out, nil
}

// reactRequest builds a react task's envelope. The snapshot wins over the
// live row: a resource with one was hard-deleted.
func reactRequest(t model.Task, live map[string]model.Resource, snapshots map[string]webhooksdk.Resource, def cfg) (webhooksdk.Envelope, error) {
	res, ok := snapshots[t.ID]
	if !ok {
		r, found := live[t.ResourceID]
		if !found {
			return webhooksdk.Envelope{}, ErrResourceVanished
		}
		res = r.Resource
	}
	env := webhooksdk.Envelope{
		TaskID: t.ID, ClaimEpoch: t.Epoch, Attempt: t.Attempts + 1, TaskType: t.Type,
		Reaction: t.Reaction, Trigger: t.Trigger, Kind: t.Kind, KindVersion: t.KindVersion,
		Resource: &res, Transition: t.Transition, DedupToken: DedupToken(t),
		Config: def.spec, Bundle: def.data,
	}
	if !t.Deadline.IsZero() {
		env.Deadline = t.Deadline.UTC().Truncate(time.Millisecond)
	}
	return env, nil
}

// DedupToken is a react task's stable identity across redeliveries:
// <resource-id>:<transition>:<generation>:<binding>. Binding-scoped, so two
// reactors bound to the same transition never share one.
func DedupToken(t model.Task) string {
	return fmt.Sprintf("%s:%s:%d:%s", t.ResourceID, t.Transition, t.Generation, t.Binding)
}

// ErrOperationGone means an operate task's op is no longer pending or running.
var ErrOperationGone = errors.New("operation no longer pending or running")

func needsChildren(t model.Task) bool {
	return t.Trigger == webhooksdk.TriggerChildrenSettled ||
		(t.Trigger == webhooksdk.TriggerSpecChange && t.Emits.Has(model.OutcomeChildren))
}
