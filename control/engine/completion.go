package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
	"github.com/convergeplane/converge/webhooksdk"
)

// ErrSuperseded means a completion arrived for a claim that no longer holds
// the task: it was reclaimed after its lease lapsed, re-pended, or its
// resource is gone, or the dispatcher gave up on it and recorded a failure
// in its place (Completion.Abandoned). The outcome was not applied.
var ErrSuperseded = errors.New("task superseded: the claim_epoch no longer holds it")

// Completion is one task's result, addressed by its claim.
type Completion struct {
	Task   model.Task
	Result webhooksdk.Result
	// Abandoned marks a failure the dispatcher records in the provider's
	// place because it gave up on the provider's answer (the request timed
	// out or broke, the task deadline passed first, a 202's callback never
	// came, the answer was not a Result): the provider's own Result for
	// this claim, should it still come by callback, was not applied, so it
	// is Superseded rather than Duplicate.
	Abandoned bool
}

// CompleteStatus says what became of a completion.
type CompleteStatus string

// Completion statuses.
const (
	// Applied: the outcome was accepted and applied (or, if it composes,
	// queued for the drainer).
	Applied CompleteStatus = "applied"
	// Duplicate: this claim's outcome was already accepted; nothing changed.
	// Never said of a claim whose accepted outcome was Abandoned.
	Duplicate CompleteStatus = "duplicate"
	// Superseded: the claim no longer holds the task, or the dispatcher
	// abandoned it; nothing changed.
	Superseded CompleteStatus = "superseded"
)

const taskCompleteSQL = `SELECT task_id, result FROM complete_tasks($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// TaskCompleteMany records results for claimed tasks in one round trip.
// Each result is checked first (size, children, conditions; see
// checkOutcome): a malformed outcome becomes a terminal error for its task,
// so a bad provider cannot poison the apply. The returned slice is parallel
// to cs.
func (e *Engine) TaskCompleteMany(ctx context.Context, cs []Completion) ([]CompleteStatus, error) {
	n := len(cs)
	ids := make([]string, n)
	shards := make([]int16, n)
	claimEpochs := make([]int64, n)
	rids := make([]string, n) // "" for a reactor delivery's: NULL
	outcomes := make([][]byte, n)
	errs := make([]*string, n)
	terms := make([]bool, n)
	abandoned := make([]bool, n)
	for i, c := range cs {
		ids[i], shards[i], claimEpochs[i], abandoned[i] = c.Task.ID, c.Task.Shard, c.Task.ClaimEpoch, c.Abandoned
		rids[i] = c.Task.ResourceID
		res := c.Result
		if res.Error == nil && res.Outcome != nil {
			if err := e.checkOutcome(c.Task, res.Outcome); err != nil {
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
	base, limit := e.retryMillis()
	args := []any{pgrun.UUIDArray(ids), shards, claimEpochs, pgrun.UUIDArray(rids), outcomes, errs, terms, abandoned, base, limit}
	byID := make(map[string]CompleteStatus, n)
	// Completions apply their outcomes, so two completers (two pods, or a
	// callback and a dispatcher) can meet on the rows an outcome moves: a
	// composite's parent, a dependent's work row. PostgreSQL breaks such a
	// cycle by rolling one back, which is then run again.
	err := pgrun.RetryDeadlock(func() error {
		clear(byID)
		rows, err := e.pool.Query(ctx, taskCompleteSQL, args...)
		if err != nil {
			return err
		}
		// Read by hand straight into the map: completion is a hot path,
		// and CollectRows would first build a slice to throw away.
		for rows.Next() {
			var id, res string
			if err := rows.Scan(&id, &res); err != nil {
				rows.Close()
				return err
			}
			byID[id] = CompleteStatus(res)
		}
		return rows.Err()
	})
	if err != nil {
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

// TaskComplete records one task's result (the provider's: not Abandoned).
// It returns ErrSuperseded if the claim no longer holds the task or the
// dispatcher abandoned it; a repeat of an accepted completion returns
// (Duplicate, nil).
func (e *Engine) TaskComplete(ctx context.Context, t model.Task, r webhooksdk.Result) (CompleteStatus, error) {
	st, err := e.TaskCompleteMany(ctx, []Completion{{Task: t, Result: r}})
	if err != nil {
		return "", err
	}
	if st[0] == Superseded {
		return Superseded, ErrSuperseded
	}
	return st[0], nil
}

// checkOutcome rejects an outcome that could not be applied cleanly. Only the
// parts the reaction's mask lets through are checked; the apply drops the rest.
func (e *Engine) checkOutcome(t model.Task, o *webhooksdk.Outcome) error {
	if t.Emits.Has(model.OutcomeStatus) && len(o.Status) > e.cfg.MaxStatusBytes {
		return fmt.Errorf("status is %d bytes, over the %d-byte limit; it was not stored", len(o.Status), e.cfg.MaxStatusBytes)
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
			if e.cfg.SpecCheck != nil {
				if err := e.cfg.SpecCheck(c.Kind, c.KindVersion, c.Spec); err != nil {
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

// AsyncState is what TaskExpireAsync found for one task.
type AsyncState string

// The async states.
const (
	// AsyncExpired: the lease had lapsed with no callback; the task was
	// completed with a transient error.
	AsyncExpired AsyncState = "expired"
	// AsyncHeld: still claimed at its epoch; a heartbeat moved the lease.
	AsyncHeld AsyncState = "held"
	// AsyncGone: completed by a callback, superseded, or removed.
	AsyncGone AsyncState = "gone"
)

// AsyncCheck is TaskExpireAsync's answer for one task.
type AsyncCheck struct {
	State AsyncState
	// LeaseUntil is the current lease end of a held task.
	LeaseUntil time.Time
}

// asyncRow is one row of expire_async_tasks(): a task it found.
type asyncRow struct {
	TaskID     string     `db:"task_id"`
	State      AsyncState `db:"state"`
	LeaseUntil *time.Time `db:"lease_until"`
}

// TaskExpireAsync ends the asynchronous deliveries among tasks (answered 202,
// awaiting a callback) whose lease lapsed: they are completed with a
// transient error carrying message, which burns an attempt, so a provider
// that never calls back is retried with backoff and eventually fails the
// resource (max_transient_attempts) instead of looping silently. The lease
// check and the completion hold the row lock, so a racing heartbeat or
// callback either wins cleanly or finds the task gone. The result is
// parallel to tasks.
func (e *Engine) TaskExpireAsync(ctx context.Context, tasks []model.Task, message string) ([]AsyncCheck, error) {
	ids, shards, claimEpochs := taskKeys(tasks)
	base, limit := e.retryMillis()
	var found []asyncRow
	// An expiry applies its failures as a completion does, so it can
	// deadlock as one can (TaskCompleteMany).
	err := pgrun.RetryDeadlock(func() (err error) {
		found, err = pgrun.Collect(ctx, e.pool, pgx.RowToStructByName[asyncRow],
			`SELECT task_id, state, lease_until FROM expire_async_tasks($1, $2, $3, $4, $5, $6)`, ids, shards, claimEpochs, message, base, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("expire async tasks: %w", err)
	}
	byID := make(map[string]AsyncCheck, len(found))
	for _, r := range found {
		c := AsyncCheck{State: r.State}
		if r.LeaseUntil != nil {
			c.LeaseUntil = *r.LeaseUntil
		}
		byID[r.TaskID] = c
	}
	out := make([]AsyncCheck, len(tasks))
	for i, t := range tasks {
		out[i] = byID[t.ID]
		if out[i].State == "" {
			out[i].State = AsyncGone
		}
	}
	return out, nil
}
