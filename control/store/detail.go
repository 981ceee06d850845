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

// TaskInfo is the live state of a resource's reconcile task: what the
// resource detail shows under "current claim".
type TaskInfo struct {
	TaskID      string     `json:"task_id"`
	State       string     `json:"state"` // pending, claimed, or completed (its outcome awaits the drain)
	Trigger     string     `json:"trigger"`
	Reaction    string     `json:"reaction,omitempty"`
	Generation  int64      `json:"generation"`
	Attempts    int        `json:"attempts"`
	ClaimEpoch  int64      `json:"claim_epoch"`
	ClaimedBy   string     `json:"claimed_by,omitempty"`
	ClaimedAt   *time.Time `json:"claimed_at,omitempty"`
	LeaseUntil  *time.Time `json:"lease_until,omitempty"`
	Deadline    *time.Time `json:"deadline,omitempty"`
	NotBefore   time.Time  `json:"not_before"`
	EnqueuedAt  time.Time  `json:"enqueued_at"`
	LastError   string     `json:"last_error,omitempty"`
	Kind        string     `json:"kind"`
	KindVersion int        `json:"kind_version"`
}

// ResourceTask returns the resource's reconcile task, or nil if none is
// queued (the drain deletes a task once its outcome is applied).
func (s *Store) ResourceTask(ctx context.Context, resourceID string) (*TaskInfo, error) {
	var (
		t  TaskInfo
		kv int16
	)
	err := s.pool.QueryRow(ctx, `SELECT w.task_id,
			CASE WHEN w.state = 'claimed' AND EXISTS (SELECT 1 FROM work_outbox o
			          WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
			     THEN 'completed' ELSE w.state END,
			w.trigger, coalesce(w.reaction, ''), w.generation, w.attempts,
			w.claim_epoch, coalesce(w.claimed_by, ''), w.claimed_at, w.lease_until, w.deadline, w.not_before,
			w.enqueued_at, coalesce(w.last_error, ''), w.kind, w.kind_version
		  FROM work_queue w JOIN resources r ON r.shard_id = w.shard_id AND r.id = w.resource_id
		 WHERE r.id = $1 AND w.task_type = 'reconcile'`, resourceID).
		Scan(&t.TaskID, &t.State, &t.Trigger, &t.Reaction, &t.Generation, &t.Attempts, &t.ClaimEpoch, &t.ClaimedBy,
			&t.ClaimedAt, &t.LeaseUntil, &t.Deadline, &t.NotBefore, &t.EnqueuedAt, &t.LastError, &t.Kind, &kv)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resource task: %w", err)
	}
	t.KindVersion = int(kv)
	return &t, nil
}

// ResourceID resolves (kind, name) to an id.
func (s *Store) ResourceID(ctx context.Context, kind, name string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `SELECT id FROM resources WHERE kind = $1 AND name = $2`, kind, name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", &NotFoundError{Message: fmt.Sprintf("resource %s/%s does not exist", kind, name)}
	}
	if err != nil {
		return "", fmt.Errorf("resolve resource: %w", err)
	}
	return id, nil
}

// Children returns the resources a composite owns directly.
func (s *Store) Children(ctx context.Context, ownerID string) ([]model.Resource, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+resourceCols+` FROM resources r WHERE r.owner_id = $1 ORDER BY r.kind, r.name`, ownerID)
	if err != nil {
		return nil, fmt.Errorf("children: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Resource, error) { return scanResource(r) })
	if err != nil {
		return nil, fmt.Errorf("children: %w", err)
	}
	return out, nil
}

// DepEdge is one dependency edge with both ends named and their phases.
type DepEdge struct {
	Dependent       webhooksdk.Ref         `json:"dependent"`
	DependentPhase  string                 `json:"dependent_phase"`
	Dependency      webhooksdk.Ref         `json:"dependency"`
	DependencyPhase string                 `json:"dependency_phase"`
	Values          []webhooksdk.ValueFlow `json:"values,omitempty"`
}

const edgeSelect = `SELECT a.kind, a.name, a.phase, b.kind, b.name, b.phase, d.value_flows
	  FROM resource_deps d
	  JOIN resources a ON a.id = d.dependent_id
	  JOIN resources b ON b.id = d.dependency_id `

func collectEdges(rows pgx.Rows) ([]DepEdge, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DepEdge, error) {
		var (
			e  DepEdge
			vf []byte
		)
		err := r.Scan(&e.Dependent.Kind, &e.Dependent.Name, &e.DependentPhase,
			&e.Dependency.Kind, &e.Dependency.Name, &e.DependencyPhase, &vf)
		if err == nil {
			err = json.Unmarshal(vf, &e.Values)
		}
		return e, err
	})
}

// Dependencies returns the edges on which the resource depends (upstream)
// and those that depend on it (downstream).
func (s *Store) Dependencies(ctx context.Context, id string) (upstream, downstream []DepEdge, err error) {
	rows, err := s.pool.Query(ctx, edgeSelect+`WHERE d.dependent_id = $1 ORDER BY b.kind, b.name`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("dependencies: %w", err)
	}
	if upstream, err = collectEdges(rows); err != nil {
		return nil, nil, fmt.Errorf("dependencies: %w", err)
	}
	rows, err = s.pool.Query(ctx, edgeSelect+`WHERE d.dependency_id = $1 ORDER BY a.kind, a.name`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("dependents: %w", err)
	}
	if downstream, err = collectEdges(rows); err != nil {
		return nil, nil, fmt.Errorf("dependents: %w", err)
	}
	return upstream, downstream, nil
}

// Graph is a composite's whole owned subtree and the edges among it.
type Graph struct {
	Nodes []model.Resource `json:"nodes"`
	Edges []DepEdge        `json:"edges"`
}

// GraphLimit bounds a graph read.
const GraphLimit = 10000

// Graph returns the subtree rooted at id (the root included) and every edge
// whose ends both lie in it; at most GraphLimit nodes.
func (s *Store) Graph(ctx context.Context, id string) (Graph, error) {
	const tree = `WITH RECURSIVE t(id, depth) AS (
			SELECT id, 0 FROM resources WHERE id = $1
			UNION ALL
			SELECT r.id, t.depth + 1 FROM resources r JOIN t ON r.owner_id = t.id WHERE t.depth < 64)`
	rows, err := s.pool.Query(ctx, tree+` SELECT `+resourceCols+` FROM resources r JOIN t ON t.id = r.id
		ORDER BY t.depth, r.kind, r.name LIMIT $2`, id, GraphLimit)
	if err != nil {
		return Graph{}, fmt.Errorf("graph: %w", err)
	}
	var g Graph
	if g.Nodes, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Resource, error) { return scanResource(r) }); err != nil {
		return Graph{}, fmt.Errorf("graph: %w", err)
	}
	rows, err = s.pool.Query(ctx, tree+` `+edgeSelect+`
		WHERE d.dependent_id IN (SELECT id FROM t) AND d.dependency_id IN (SELECT id FROM t)
		ORDER BY a.kind, a.name, b.kind, b.name`, id)
	if err != nil {
		return Graph{}, fmt.Errorf("graph edges: %w", err)
	}
	if g.Edges, err = collectEdges(rows); err != nil {
		return Graph{}, fmt.Errorf("graph edges: %w", err)
	}
	return g, nil
}

// Event is one entry of a resource's event log.
type Event struct {
	ID         int64     `json:"id"`
	At         time.Time `json:"at"`
	Type       string    `json:"type"`
	Generation *int64    `json:"generation,omitempty"`
	Message    string    `json:"message,omitempty"`
}

// Events returns the resource's events, newest first, before the id cursor
// (0 = from the newest).
func (s *Store) Events(ctx context.Context, id string, before int64, limit int) ([]Event, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, at, type, generation, message FROM resource_events
		WHERE resource_id = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, id, before, limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Event])
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return out, nil
}

// ReconcileNow asks for an immediate reconcile; see reconcile_now().
// It returns a *ConflictError when the resource is frozen or being deleted.
func (s *Store) ReconcileNow(ctx context.Context, id string) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT reconcile_now($1)`, id).Scan(&ok); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	if !ok {
		return &ConflictError{Message: "the resource is orphaned, quarantined or being deleted; it cannot be reconciled now"}
	}
	return nil
}
