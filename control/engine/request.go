package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
	"github.com/convergeplane/converge/webhooksdk"
)

// RequestBuild assembles the request each claimed task carries: the
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
// A work task's resource is the one its claim read (model.Task.Resource);
// only tasks claimed without one read theirs here.
//
// failed is parallel to tasks: a task that gets no request has its reason
// there — its resource vanished (before its claim read it, or for a task
// claimed without one, before this read), or its effective config
// cannot be built (a stored override that is not a JSON object) — and only
// that task fails: one bad row must not hold back the batch it was claimed
// with. The error is for the batch as a whole (the database).
func (e *Engine) RequestBuild(ctx context.Context, tasks []model.Task) (envs []webhooksdk.Envelope, failed []error, err error) {
	return e.buildRequests(ctx, tasks, true)
}

// buildRequests is RequestBuild; start false reads an operate task's
// operation without marking it running or counting an attempt, for a
// request built again under the same claim (RequestRebuild).
func (e *Engine) buildRequests(ctx context.Context, tasks []model.Task, start bool) (envs []webhooksdk.Envelope, failed []error, err error) {
	// A task the claim returned with its resource needs no read; the others
	// (react tasks, tasks whose resource was gone at the claim, a rebuilt
	// request's) read theirs now. A request points at the resource it was
	// built from, the claim's copy included: nothing writes through it.
	byID := make(map[string]*model.Resource, len(tasks))
	var ids []string
	for _, t := range tasks {
		if t.Resource != nil {
			byID[t.ResourceID] = t.Resource
		} else {
			ids = append(ids, t.ResourceID)
		}
	}
	if len(ids) > 0 {
		res, err := pgrun.Collect(ctx, e.pool, scanResource, `SELECT `+resourceCols+` FROM resources r WHERE r.id = ANY ($1)`,
			pgrun.UUIDArray(ids))
		if err != nil {
			return nil, nil, fmt.Errorf("load task resources: %w", err)
		}
		for i := range res {
			byID[res[i].ID] = &res[i]
		}
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
		} else if r := byID[t.ResourceID]; r != nil && r.ProviderConfigRef != "" {
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
	snapshots, err := e.reactSnapshots(ctx, reacts)
	if err != nil {
		return nil, nil, err
	}
	children := map[string][]model.Resource{}
	if len(parents) > 0 {
		kids, err := pgrun.Collect(ctx, e.pool, scanResource, `SELECT `+resourceCols+` FROM resources r
			WHERE r.owner_id = ANY ($1) AND (r.frozen_until IS NULL OR r.frozen_until <> 'infinity')
			ORDER BY r.kind, r.name`, parents)
		if err != nil {
			return nil, nil, fmt.Errorf("load children: %w", err)
		}
		for _, k := range kids {
			children[k.OwnerID] = append(children[k.OwnerID], k)
		}
	}
	defaults := map[string]cfg{}
	overrides := map[string]cfg{}
	// RequestBuild runs on every claimed batch: the configs are read by
	// hand straight into the two maps rather than collected into a slice
	// first.
	rows, err := e.pool.Query(ctx, `SELECT name, kind || '/' || kind_version, is_default, spec, data FROM providerconfigs
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

	ops, err := e.operations(ctx, tasks, start)
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
			TaskID: t.ID, ClaimEpoch: t.ClaimEpoch, Attempt: t.Attempts + 1, TaskType: t.Type,
			Reaction: t.Reaction, Trigger: t.Trigger, Kind: t.Kind, KindVersion: t.KindVersion,
			Resource: &r.Resource, Status: r.Status,
		}
		if t.Trigger == webhooksdk.TriggerOperation {
			op, found := ops[t.ID]
			if !found {
				failed[i] = ErrOperationGone
				continue
			}
			req.Operation = &op
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
func (e *Engine) reactSnapshots(ctx context.Context, ids []string) (map[string]webhooksdk.Resource, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := e.pool.Query(ctx, `SELECT task_id, snapshot FROM lifecycle_outbox
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
func reactRequest(t model.Task, live map[string]*model.Resource, snapshots map[string]webhooksdk.Resource, def cfg) (webhooksdk.Envelope, error) {
	res, ok := snapshots[t.ID]
	if !ok {
		r, found := live[t.ResourceID]
		if !found {
			return webhooksdk.Envelope{}, ErrResourceVanished
		}
		res = r.Resource
	}
	env := webhooksdk.Envelope{
		TaskID: t.ID, ClaimEpoch: t.ClaimEpoch, Attempt: t.Attempts + 1, TaskType: t.Type,
		Reaction: t.Reaction, Trigger: t.Trigger, Kind: t.Kind, KindVersion: t.KindVersion,
		Resource: &res, Transition: t.Transition, DedupToken: dedupToken(t),
		Config: def.spec, Bundle: def.data,
	}
	if !t.Deadline.IsZero() {
		env.Deadline = t.Deadline.UTC().Truncate(time.Millisecond)
	}
	return env, nil
}

// dedupToken is a react task's stable identity across redeliveries:
// <resource-id>:<transition>:<generation>:<binding>. Binding-scoped, so two
// reactors bound to the same transition never share one.
func dedupToken(t model.Task) string {
	return fmt.Sprintf("%s:%s:%d:%s", t.ResourceID, t.Transition, t.Generation, t.Binding)
}

// ErrOperationGone means an operate task's op is no longer pending or running.
var ErrOperationGone = errors.New("operation no longer pending or running")

func needsChildren(t model.Task) bool {
	return t.Trigger == webhooksdk.TriggerChildrenSettled ||
		(t.Trigger == webhooksdk.TriggerSpecChange && t.Emits.Has(model.OutcomeChildren))
}

// payloadTaskSQL loads a task while claim c still holds it: a work task
// claimed at c's epoch whose completion is not already waiting in the
// outbox, or a reactor delivery claimed at that epoch (the fence
// extend_leases applies). A reactor delivery's kind is resolved as
// claim_tasks resolves it.
const payloadTaskSQL = `SELECT w.task_id, w.resource_id, w.task_type, w.trigger, coalesce(w.reaction, ''),
       w.kind, w.kind_version, w.claimed_gen, w.attempts, ''::text, ''::text
  FROM work_queue w
 WHERE w.task_id = $1 AND w.shard_id = $2 AND w.claim_epoch = $3 AND w.state = 'claimed'
   AND NOT EXISTS (SELECT 1 FROM work_outbox o
                    WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
UNION ALL
SELECT l.task_id, l.resource_id, 'react', 'reactor', coalesce(rk.reactor_reaction, ''),
       rk.kind, rk.kind_version, l.generation, l.attempts, l.transition::text, l.binding_name::text
  FROM lifecycle_outbox l
  JOIN reactor_bindings b ON b.name = l.binding_name
 CROSS JOIN LATERAL (
       SELECT m.kind, m.kind_version, m.reactor_reaction
         FROM kind_manifest m
        WHERE m.kind = b.reactor AND m.is_reactor
          AND (b.reactor_version IS NULL OR m.kind_version = b.reactor_version)
        ORDER BY m.kind_version DESC
        LIMIT 1) rk
 WHERE l.task_id = $1 AND l.shard_id = $2 AND l.claim_epoch = $3 AND l.claimed_by IS NOT NULL
 LIMIT 1`

// RequestRebuild builds again the request of the task claim c holds, for a
// provider that received it thin (over its target's request limit) and
// fetches the rest. It reads only: an operate task's attempt was counted
// when the request was first built. The documents are read now, so they
// may be newer than at delivery; the claim is what must still hold. A claim
// that no longer holds the task is ErrSuperseded; a task whose request
// cannot be built (its resource vanished) fails with that reason.
func (e *Engine) RequestRebuild(ctx context.Context, c model.Task) (webhooksdk.Envelope, error) {
	rows, err := e.pool.Query(ctx, payloadTaskSQL, c.ID, c.Shard, c.ClaimEpoch)
	if err != nil {
		return webhooksdk.Envelope{}, fmt.Errorf("load task payload: %w", err)
	}
	t, err := pgx.CollectOneRow(rows, func(r pgx.CollectableRow) (model.Task, error) {
		var (
			t  model.Task
			kv int16
		)
		err := r.Scan(&t.ID, &t.ResourceID, &t.Type, &t.Trigger, &t.Reaction, &t.Kind, &kv,
			&t.Generation, &t.Attempts, &t.Transition, &t.Binding)
		t.KindVersion = int(kv)
		return t, err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return webhooksdk.Envelope{}, ErrSuperseded
	}
	if err != nil {
		return webhooksdk.Envelope{}, fmt.Errorf("load task payload: %w", err)
	}
	t.Shard, t.ClaimEpoch, t.Emits, t.Deadline = c.Shard, c.ClaimEpoch, c.Emits, c.Deadline
	envs, failed, err := e.buildRequests(ctx, []model.Task{t}, false)
	if err != nil {
		return webhooksdk.Envelope{}, err
	}
	if failed[0] != nil {
		return webhooksdk.Envelope{}, failed[0]
	}
	return envs[0], nil
}

// operations marks the ops of the claimed operate tasks in tasks running,
// counts the attempt, and returns each one's verb and input by task id (an
// operate task's id is its op's). With start false it only reads the
// running ones.
func (e *Engine) operations(ctx context.Context, tasks []model.Task, start bool) (map[string]webhooksdk.Operation, error) {
	var ids []string
	for _, t := range tasks {
		if t.Trigger == webhooksdk.TriggerOperation {
			ids = append(ids, t.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	sql := `UPDATE resource_operations o
		   SET state = 'running', attempts = o.attempts + 1, updated_at = now()
		 WHERE o.id = ANY ($1) AND o.state IN ('pending','running')
		RETURNING o.id, o.verb, o.input`
	if !start {
		sql = `SELECT o.id, o.verb, o.input FROM resource_operations o WHERE o.id = ANY ($1) AND o.state = 'running'`
	}
	type opRow struct {
		ID    string
		Verb  string
		Input json.RawMessage
	}
	ops, err := pgrun.Collect(ctx, e.pool, pgx.RowToStructByPos[opRow], sql, ids)
	if err != nil {
		return nil, fmt.Errorf("start operations: %w", err)
	}
	out := make(map[string]webhooksdk.Operation, len(ops))
	for _, op := range ops {
		out[op.ID] = webhooksdk.Operation{Verb: op.Verb, Input: op.Input}
	}
	return out, nil
}

// resourceCols are the columns a request's resources are read with, from
// alias r (scanResource); the claim returns the same columns with each work
// task (claimedResourceCols).
const resourceCols = `r.id, r.kind, r.kind_version, r.name, r.labels, r.spec, r.status, r.owner_id,
       coalesce(r.provider_config_ref, ''), r.generation, r.synced_gen, r.health_ok, r.failure_gen,
       r.phase, coalesce(r.last_error, ''), r.created_at, r.updated_at, r.resource_version`

// scanResource reads resourceCols. model.Resource is control/model's wire
// type and carries no db tags, and this scan serves the claim path
// (RequestBuild), so it stays by position.
func scanResource(row pgx.CollectableRow) (model.Resource, error) {
	var s resourceScan
	err := row.Scan(s.dest(nil)...)
	return s.resource(), err
}

// resourceScan receives one row's resourceCols: the read's (scanResource)
// and the claim's (scanClaimed) alike.
type resourceScan struct {
	r     model.Resource
	kv    int16
	owner *string
}

// dest appends the scan destinations to into, in resourceCols' order.
func (s *resourceScan) dest(into []any) []any {
	r := &s.r
	return append(into, &r.ID, &r.Kind, &s.kv, &r.Name, &r.Labels, &r.Spec, &r.Status, &s.owner,
		&r.ProviderConfigRef, &r.Generation, &r.SyncedGen, &r.HealthOK, &r.FailureGen,
		&r.Phase, &r.LastError, &r.CreatedAt, &r.UpdatedAt, &r.ResourceVersion)
}

// resource returns the resource scanned.
func (s *resourceScan) resource() model.Resource {
	s.r.KindVersion = int(s.kv)
	if s.owner != nil {
		s.r.OwnerID = *s.owner
	}
	return s.r
}
