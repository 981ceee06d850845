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

// ErrSuperseded means a completion arrived for a claim that no longer holds
// the task: it was reclaimed after its lease lapsed, re-pended, or its
// resource is gone. The outcome was not applied.
var ErrSuperseded = errors.New("task superseded: the claim_epoch no longer holds it")

// ClaimParams selects what Claim may take.
type ClaimParams struct {
	// Claimer identifies the claiming process (stamped as claimed_by).
	Claimer string
	// Lo and Hi bound the shard range, inclusive.
	Lo, Hi int
	// Pairs lists the "kind/version" pairs the caller can serve; nil means
	// every pair (an in-process executor that serves all kinds).
	Pairs []string
	// Limit caps the batch.
	Limit int
	// Lease is how long the claim holds without renewal before the reaper
	// may reclaim it.
	Lease time.Duration
}

// claimSQL logs a `claimed` event per task in the claim's own statement
// (no second round trip): who took it, at which epoch and attempt.
const claimSQL = `WITH c AS (SELECT * FROM claim_tasks($1, $2, $3, $4, $5, $6)),
ev AS (
    INSERT INTO resource_events (resource_id, type, generation, message)
    SELECT c.resource_id, 'claimed', c.generation,
           format('by %s, claim_epoch %s, attempt %s', $1::text, c.claim_epoch, c.attempts + 1)
      FROM c)
SELECT task_id, shard_id, resource_id, task_type, trigger, coalesce(reaction, ''), emits,
       kind, kind_version, generation, claim_epoch, attempts, deadline
  FROM c`

// Claim claims up to p.Limit pending tasks, bumping each one's claim_epoch.
// Per-kind caps (kind_config.max_inflight) hold across all claimers.
func (s *Store) Claim(ctx context.Context, p ClaimParams) ([]model.Task, error) {
	lease := int(p.Lease / time.Second)
	if lease < 1 {
		lease = 1
	}
	var pairs any
	if p.Pairs != nil {
		pairs = p.Pairs
	}
	rows, err := s.pool.Query(ctx, claimSQL, p.Claimer, p.Lo, p.Hi, pairs, p.Limit, lease)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Task, error) {
		var (
			t        model.Task
			emits    int32
			kv       int16
			deadline *time.Time
		)
		err := r.Scan(&t.ID, &t.Shard, &t.ResourceID, &t.Type, &t.Trigger, &t.Reaction, &emits,
			&t.Kind, &kv, &t.Generation, &t.Epoch, &t.Attempts, &deadline)
		t.Emits = model.OutcomeMask(emits)
		t.KindVersion = int(kv)
		if deadline != nil {
			t.Deadline = *deadline
		}
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return tasks, nil
}

// Completion is one task's result, addressed by its claim.
type Completion struct {
	Task   model.Task
	Result webhooksdk.Result
}

// CompleteStatus says what became of a completion.
type CompleteStatus string

// Completion statuses.
const (
	// Applied: the outcome was accepted and queued for the drainer.
	Applied CompleteStatus = "applied"
	// Duplicate: this claim's outcome was already accepted; nothing changed.
	Duplicate CompleteStatus = "duplicate"
	// Superseded: the claim no longer holds the task; nothing changed.
	Superseded CompleteStatus = "superseded"
)

const completeSQL = `SELECT task_id, result FROM complete_tasks($1, $2, $3, $4, $5, $6, $7)`

// CompleteBatch records results for claimed tasks in one round trip. Each
// result is checked first (size, children, conditions; see checkOutcome): a
// malformed outcome becomes a terminal error for its task, so a bad provider
// cannot poison the drain. The returned slice is parallel to cs.
func (s *Store) CompleteBatch(ctx context.Context, cs []Completion) ([]CompleteStatus, error) {
	n := len(cs)
	ids := make([]string, n)
	shards := make([]int16, n)
	epochs := make([]int64, n)
	rids := make([]*string, n)
	outcomes := make([][]byte, n)
	errs := make([]*string, n)
	terms := make([]bool, n)
	for i, c := range cs {
		ids[i], shards[i], epochs[i] = c.Task.ID, c.Task.Shard, c.Task.Epoch
		if c.Task.ResourceID != "" {
			rids[i] = &c.Task.ResourceID
		}
		res := c.Result
		if res.Error == nil && res.Outcome != nil {
			if err := s.checkOutcome(c.Task, res.Outcome); err != nil {
				res = webhooksdk.Result{Error: &webhooksdk.Error{Message: err.Error(), Terminal: true}}
			}
		}
		if res.Error != nil {
			msg := res.Error.Message
			if msg == "" {
				msg = "task failed without a message"
			}
			errs[i], terms[i] = &msg, res.Error.Terminal
			continue
		}
		if res.Outcome != nil {
			b, err := json.Marshal(res.Outcome)
			if err != nil {
				return nil, fmt.Errorf("encode outcome: %w", err)
			}
			outcomes[i] = b
		}
	}
	rows, err := s.pool.Query(ctx, completeSQL, ids, shards, epochs, rids, outcomes, errs, terms)
	if err != nil {
		return nil, fmt.Errorf("complete tasks: %w", err)
	}
	byID := make(map[string]CompleteStatus, n)
	for rows.Next() {
		var id, res string
		if err := rows.Scan(&id, &res); err != nil {
			rows.Close()
			return nil, fmt.Errorf("complete tasks: %w", err)
		}
		byID[id] = CompleteStatus(res)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("complete tasks: %w", err)
	}
	out := make([]CompleteStatus, n)
	for i, id := range ids {
		if out[i] = byID[id]; out[i] == "" {
			out[i] = Applied // complete_tasks lists only what it did not apply
		}
	}
	return out, nil
}

// Complete records one task's result. It returns ErrSuperseded if the claim
// no longer holds the task; a repeat of an accepted completion returns
// (Duplicate, nil).
func (s *Store) Complete(ctx context.Context, t model.Task, r webhooksdk.Result) (CompleteStatus, error) {
	st, err := s.CompleteBatch(ctx, []Completion{{Task: t, Result: r}})
	if err != nil {
		return "", err
	}
	if st[0] == Superseded {
		return Superseded, ErrSuperseded
	}
	return st[0], nil
}

// checkOutcome rejects an outcome the drain could not apply cleanly. Only the
// parts the reaction's mask lets through are checked; the drain drops the rest.
func (s *Store) checkOutcome(t model.Task, o *webhooksdk.Outcome) error {
	if t.Emits.Has(model.OutcomeStatus) && len(o.Status) > s.cfg.MaxStatusBytes {
		return fmt.Errorf("status is %d bytes, over the %d-byte limit; it was not stored", len(o.Status), s.cfg.MaxStatusBytes)
	}
	if t.Emits.Has(model.OutcomeConditions) {
		seen := make(map[string]bool, len(o.Conditions))
		for i, c := range o.Conditions {
			switch {
			case c.Type == "":
				return fmt.Errorf("conditions[%d].type is required", i)
			case c.Status != "True" && c.Status != "False" && c.Status != "Unknown":
				return fmt.Errorf("conditions[%d].status %q is not True, False or Unknown", i, c.Status)
			case seen[c.Type]:
				return fmt.Errorf("conditions[%d].type %q is reported twice", i, c.Type)
			}
			seen[c.Type] = true
		}
	}
	if t.Emits.Has(model.OutcomeChildren) {
		seen := make(map[webhooksdk.Ref]bool, len(o.Children))
		for i, c := range o.Children {
			ref := webhooksdk.Ref{Kind: c.Kind, Name: c.Name}
			switch {
			case !model.ValidKindVersion(c.KindVersion):
				return fmt.Errorf("children[%d] (%s/%s): kind_version %d is not in 1..%d; every child needs an explicit version", i, c.Kind, c.Name, c.KindVersion, model.MaxKindVersion)
			case !model.ValidKind(c.Kind):
				return fmt.Errorf("children[%d]: kind %q is not a valid kind name", i, c.Kind)
			case !model.ValidName(c.Name):
				return fmt.Errorf("children[%d]: name %q is not a valid resource name", i, c.Name)
			case seen[ref]:
				return fmt.Errorf("children[%d]: %s/%s is emitted twice", i, c.Kind, c.Name)
			}
			seen[ref] = true
			if s.specCheck != nil {
				// A kind this pod has not cached yet is not refused here: the
				// drain's foreign key refuses a kind that does not exist.
				if err := s.specCheck(c.Kind, c.KindVersion, c.Spec); err != nil && !errors.Is(err, ErrNotFound) {
					return fmt.Errorf("children[%d] (%s/%s): %w", i, c.Kind, c.Name, err)
				}
			}
		}
	}
	if t.Emits.Has(model.OutcomeEdges) {
		for i, e := range o.Edges {
			if e.Dependent == e.Dependency {
				return fmt.Errorf("edges[%d]: %s/%s cannot depend on itself", i, e.Dependent.Kind, e.Dependent.Name)
			}
			for j, v := range e.Values {
				if !validPointer(v.DependentField) || !validPointer(v.SourceField) {
					return fmt.Errorf("edges[%d].values[%d]: fields must be JSON pointers like \"/vpc_id\"", i, j)
				}
			}
		}
	}
	if t.Emits.Has(model.OutcomeConfigs) {
		for i, c := range o.Configs {
			if !model.ValidKindVersion(c.KindVersion) {
				return fmt.Errorf("configs[%d] (%s): kind_version %d is not in 1..%d", i, c.Name, c.KindVersion, model.MaxKindVersion)
			}
			if !model.ValidName(c.Name) {
				return fmt.Errorf("configs[%d]: name %q is not a valid config name", i, c.Name)
			}
			if err := webhooksdk.CheckConfigSpec(c.Spec); err != nil {
				return fmt.Errorf("configs[%d] (%s): spec %w", i, c.Name, err)
			}
		}
	}
	return nil
}

func validPointer(p string) bool { return p != "" && p[0] == '/' }

// SpecCheckFunc validates a spec against its (kind, version) schema.
type SpecCheckFunc func(kind string, version int, spec json.RawMessage) error

// SetSpecCheck installs the validator Complete runs on every composed
// child's spec, so a composer cannot create a resource the API would refuse.
// Call it once before the store is shared.
func (s *Store) SetSpecCheck(f SpecCheckFunc) { s.specCheck = f }

// Release gives claimed tasks back without burning an attempt; they are
// claimable again after delay.
func (s *Store) Release(ctx context.Context, tasks []model.Task, delay time.Duration, reason string) error {
	ids, shards, epochs := taskKeys(tasks)
	_, err := s.pool.Exec(ctx, `SELECT release_tasks($1, $2, $3, $4, $5)`, ids, shards, epochs, int(delay/time.Millisecond), reason)
	if err != nil {
		return fmt.Errorf("release tasks: %w", err)
	}
	return nil
}

// ExtendLeases renews the leases of tasks still held and returns the IDs of
// those it renewed; a missing ID was superseded.
func (s *Store) ExtendLeases(ctx context.Context, tasks []model.Task, lease time.Duration) (map[string]bool, error) {
	ids, shards, epochs := taskKeys(tasks)
	rows, err := s.pool.Query(ctx, `SELECT task_id FROM extend_leases($1, $2, $3, $4)`, ids, shards, epochs, max(int(lease/time.Second), 1))
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	out := make(map[string]bool, len(held))
	for _, id := range held {
		out[id] = true
	}
	return out, nil
}

func taskKeys(tasks []model.Task) ([]string, []int16, []int64) {
	ids := make([]string, len(tasks))
	shards := make([]int16, len(tasks))
	epochs := make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i], shards[i], epochs[i] = t.ID, t.Shard, t.Epoch
	}
	return ids, shards, epochs
}

// DrainParams bounds one drain batch.
type DrainParams struct {
	Lo, Hi    int
	Limit     int
	RetryBase time.Duration // first transient retry delay (jittered, doubled per attempt)
	RetryMax  time.Duration // cap on the retry delay
}

// Drain applies up to p.Limit queued outcomes and returns how many it applied.
func (s *Store) Drain(ctx context.Context, p DrainParams) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT drain_outbox_batch($1, $2, $3, $4, $5)`,
		p.Lo, p.Hi, p.Limit, int(p.RetryBase/time.Millisecond), int(p.RetryMax/time.Millisecond)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("drain outbox: %w", err)
	}
	return n, nil
}

// DrainRollupRechecks re-evaluates composite roots armed by a concurrent drain.
func (s *Store) DrainRollupRechecks(ctx context.Context, lo, hi, limit int) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT drain_rollup_rechecks($1, $2, $3)`, lo, hi, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("drain rollup rechecks: %w", err)
	}
	return n, nil
}
