package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
)

// Bounds of RecoverParams.Limit.
const (
	RecoverLimitDefault = 100
	RecoverLimitMax     = 1000
)

// RecoverParams selects the resources Recover re-drives.
type RecoverParams struct {
	// Namespace keeps one namespace's resources; "" is DefaultNamespace.
	Namespace string
	// Kind keeps one kind; "" keeps every kind.
	Kind string
	// Selector keeps resources whose labels meet every requirement.
	Selector LabelSelector
	// Phase is PhaseFailed ("" too) or PhaseDegraded: the phases a
	// reconcile can lift (a failure of the current generation, a
	// Ready=False report).
	Phase model.Phase
	// Since keeps resources that entered the phase at or after it: their
	// newest failed or succeeded event at their current generation (the
	// failure for Failed, the health flip for Degraded) is at or after
	// Since. Zero keeps every resource in the phase.
	Since time.Time
	// Limit bounds the resources matched: RecoverLimitDefault when 0, at
	// most RecoverLimitMax.
	Limit int
}

// RecoverTarget is one resource Recover matched.
type RecoverTarget struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	// Reconciled is false on a dry run, and for a resource reconcile_now
	// would not touch (orphaned: frozen until its grace ends).
	Reconciled bool `json:"reconciled"`
}

// RecoverResult is what Recover matched and did.
type RecoverResult struct {
	// Targets are the matched resources, oldest first, at most Limit.
	Targets []RecoverTarget
	// Reconciled counts the targets re-driven.
	Reconciled int
	// More says more resources match beyond Limit.
	More bool
}

// Recover re-drives, as reconcile_now does one resource (a pending task
// runs now with its attempts reset, a terminal failure is lifted and
// scheduled anew on today's spec), at most Limit of the resources p
// selects, in creation order, in one transaction: each becomes a new
// claim of its current generation. Each re-driven resource's event log
// gets reconcile_now's reconcile_requested event and a recovered event
// naming the request (phase, since), one per resource. A re-driven Failed resource leaves the phase
// (it is Reconciling, or Failed only while its still-queued retry waits to
// be claimed), so a second call re-drives none of the same resources once
// their tasks run, and at worst runs an already queued task at once
// again: never a second task. Invalid parameters return *InvalidError.
func (s *Store) Recover(ctx context.Context, p RecoverParams) (RecoverResult, error) {
	limit := p.Limit
	switch {
	case limit == 0:
		limit = RecoverLimitDefault
	case limit < 1 || limit > RecoverLimitMax:
		return RecoverResult{}, &InvalidError{Location: "limit", Message: fmt.Sprintf("must be in 1..%d", RecoverLimitMax)}
	}
	phase := p.Phase
	if phase == "" {
		phase = model.PhaseFailed
	}
	if phase != model.PhaseFailed && phase != model.PhaseDegraded {
		return RecoverResult{}, &InvalidError{Location: "phase", Message: fmt.Sprintf("must be %s or %s", model.PhaseFailed, model.PhaseDegraded)}
	}
	if err := p.Selector.validate(); err != nil {
		return RecoverResult{}, err
	}
	var (
		q   = `SELECT r.id, r.namespace, r.kind, r.name FROM resources r WHERE r.phase = `
		qa  queryArgs
		arg = qa.add
	)
	q += arg(string(phase))
	if phase == model.PhaseFailed {
		q += ` AND r.failure_gen > 0 AND r.failure_gen = r.generation` // idx_resources_failed
	}
	q += ` AND r.namespace = ` + arg(orDefault(p.Namespace))
	if p.Kind != "" {
		q += ` AND r.kind = ` + arg(p.Kind)
	}
	if len(p.Selector) > 0 {
		q += ` AND ` + p.Selector.where("r.labels", arg)
	}
	if !p.Since.IsZero() {
		q += ` AND (SELECT e.at FROM resource_events e WHERE e.resource_id = r.id AND e.generation = r.generation
		            AND e.type IN ('failed', 'succeeded') ORDER BY e.id DESC LIMIT 1) >= ` + arg(p.Since)
	}
	q += ` ORDER BY r.created_at, r.id LIMIT ` + arg(limit+1)
	q += ` FOR UPDATE OF r`
	var out RecoverResult
	run := func(tx pgx.Tx) error {
		out = RecoverResult{}
		rows, err := tx.Query(ctx, q, qa...)
		if err != nil {
			return err
		}
		targets, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RecoverTarget, error) {
			var t RecoverTarget
			return t, row.Scan(&t.ID, &t.Namespace, &t.Kind, &t.Name)
		})
		if err != nil {
			return err
		}
		if len(targets) > limit {
			targets, out.More = targets[:limit], true
		}
		out.Targets = targets
		ids := make([]string, len(out.Targets))
		for i, t := range out.Targets {
			ids[i] = t.ID
		}
		done, err := pgrun.Collect(ctx, tx, pgx.RowTo[string],
			`SELECT id::text FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, n) WHERE reconcile_now(id) ORDER BY n`, ids)
		if err != nil {
			return err
		}
		for i := range out.Targets {
			out.Targets[i].Reconciled = slices.Contains(done, out.Targets[i].ID)
		}
		out.Reconciled = len(done)
		_, err = tx.Exec(ctx, `INSERT INTO resource_events (resource_id, type, generation, message)
			SELECT id, 'recovered', generation, $2 FROM resources WHERE id = ANY ($1::uuid[])`, done, recoverMessage(phase, p.Since))
		return err
	}
	err := pgrun.RetryDeadlock(func() error {
		return pgx.BeginFunc(ctx, s.pool, run)
	})
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recover: %w", err)
	}
	if out.Targets == nil {
		out.Targets = []RecoverTarget{}
	}
	return out, nil
}

// recoverMessage is the recovered event's message.
func recoverMessage(phase model.Phase, since time.Time) string {
	if since.IsZero() {
		return fmt.Sprintf("re-driven by POST /resources:reconcile (phase %s)", phase)
	}
	return fmt.Sprintf("re-driven by POST /resources:reconcile (phase %s since %s)", phase, since.UTC().Format(time.RFC3339))
}
