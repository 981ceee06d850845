package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// failed is parallel to tasks: a task that gets no request has its reason
// there — its resource vanished since the claim, or its effective config
// cannot be built (a stored override that is not a JSON object) — and only
// that task fails: one bad row must not hold back the batch it was claimed
// with. The error is for the batch as a whole (the database).
func (s *Store) BuildRequests(ctx context.Context, tasks []model.Task) (envs []webhooksdk.Envelope, failed []error, err error) {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ResourceID
	}
	rows, err := s.pool.Query(ctx, `SELECT `+resourceCols+` FROM resources r WHERE r.id = ANY ($1)`, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("load task resources: %w", err)
	}
	res, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Resource, error) { return scanResource(r) })
	if err != nil {
		return nil, nil, fmt.Errorf("load task resources: %w", err)
	}
	byID := make(map[string]model.Resource, len(res))
	var (
		parents []string
		pairs   []string
		refs    []string
	)
	for _, r := range res {
		byID[r.ID] = r
		if r.ProviderConfigRef != "" {
			refs = append(refs, r.ProviderConfigRef)
		}
	}
	seenPair := map[string]bool{}
	for _, t := range tasks {
		if needsChildren(t) {
			parents = append(parents, t.ResourceID)
		}
		p := fmt.Sprintf("%s/%d", t.Kind, t.KindVersion)
		if !seenPair[p] {
			seenPair[p] = true
			pairs = append(pairs, p)
		}
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
	type cfg struct {
		spec json.RawMessage
		data []byte
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

	ops, err := s.operationsOf(ctx, tasks)
	if err != nil {
		return nil, nil, err
	}

	out := make([]webhooksdk.Envelope, len(tasks))
	failed = make([]error, len(tasks))
	for i, t := range tasks {
		r, found := byID[t.ResourceID]
		if !found {
			failed[i] = errResourceVanished
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
				failed[i] = errOperationGone
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
				// grace window: it neither counts toward nor degrades the
				// rollup (the composer still observes it, to re-adopt it).
				for _, c := range children[t.ResourceID] {
					if c.PhaseOf() != model.PhaseOrphaned {
						req.Descendants = append(req.Descendants, c.Resource)
					}
				}
			} else {
				req.Observed = model.WireResources(children[t.ResourceID])
			}
		}
		def := defaults[fmt.Sprintf("%s/%d", t.Kind, t.KindVersion)]
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

// errResourceVanished: the task's resource was deleted after the claim.
var errResourceVanished = errors.New("resource vanished")

// errOperationGone: an operate task's op is no longer pending or running.
var errOperationGone = errors.New("operation no longer pending or running")

func needsChildren(t model.Task) bool {
	return t.Trigger == webhooksdk.TriggerChildrenSettled ||
		(t.Trigger == webhooksdk.TriggerSpecChange && t.Emits.Has(model.OutcomeChildren))
}
