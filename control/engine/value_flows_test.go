package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/engine/enginetest"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// Value flows racing each other. A route depends on its vpc and its tgw,
// taking vpc_id and tgw_id from their statuses. Each test holds the tgw's
// completion (its status and its flow into the route) open, lets another
// writer of the route's spec take its snapshot and wait for the route's
// row, then commits the tgw's: the waiting writer must write on top of the
// tgw_id, not put back the spec it computed before. (The classic demo's
// route lost its tgw_id to its vpc's flow that way, and ran without it.)

// TestConcurrentFlowsIntoOneDependentBothLand: the other writer is the
// vpc's flow.
func TestConcurrentFlowsIntoOneDependentBothLand(t *testing.T) {
	t.Parallel()
	f := newFlowRace(t)
	f.race(`SELECT substitute_values(ARRAY[$1::uuid])`, f.vpc)
	f.wantRouteSpec(`{"vpc_id": "vpc-1", "tgw_id": "tgw-1"}`)
}

// TestRecomposeKeepsAFlowItsSnapshotMissed: the other writer is the
// composer's next outcome for the route, which folds in the flows its
// snapshot shows (none from the tgw yet).
func TestRecomposeKeepsAFlowItsSnapshotMissed(t *testing.T) {
	t.Parallel()
	f := newFlowRace(t)
	f.race(`SELECT apply_compose($1::uuid, '{
		"children": [
			{"kind": "leaf", "kind_version": 1, "name": "route", "spec": {"note": "recomposed"}},
			{"kind": "leaf", "kind_version": 1, "name": "vpc"},
			{"kind": "leaf", "kind_version": 1, "name": "tgw"}],
		"edges": [
			{"dependent": {"kind": "leaf", "name": "route"}, "dependency": {"kind": "leaf", "name": "vpc"},
			 "values": [{"source_field": "/vpc_id", "dependent_field": "/vpc_id"}]},
			{"dependent": {"kind": "leaf", "name": "route"}, "dependency": {"kind": "leaf", "name": "tgw"},
			 "values": [{"source_field": "/tgw_id", "dependent_field": "/tgw_id"}]}]}', 3)`, f.root)
	f.wantRouteSpec(`{"note": "recomposed", "vpc_id": "vpc-1", "tgw_id": "tgw-1"}`)
}

type flowRace struct {
	t                     *testing.T
	db                    *pgtest.Database
	root, route, vpc, tgw string
}

// newFlowRace makes a composite root owning the route, the vpc (whose
// status already has vpc_id) and the tgw (no status yet), with the route's
// two edges.
func newFlowRace(t *testing.T) *flowRace {
	t.Helper()
	ctx := context.Background()
	f := &flowRace{t: t, db: enginetest.LeafDB(t)}
	if err := f.db.Pool.QueryRow(ctx, `INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, 'root') RETURNING id::text`).
		Scan(&f.root); err != nil {
		t.Fatal(err)
	}
	if err := f.db.Pool.QueryRow(ctx, `
		WITH r AS (INSERT INTO resources (kind, kind_version, name, spec, status, owner_id)
		           SELECT 'leaf', 1, n, '{}', s::jsonb, $1::uuid
		             FROM (VALUES ('route', NULL), ('vpc', '{"vpc_id":"vpc-1"}'), ('tgw', NULL)) v(n, s)
		           RETURNING id, name)
		SELECT (SELECT id::text FROM r WHERE name = 'route'), (SELECT id::text FROM r WHERE name = 'vpc'),
		       (SELECT id::text FROM r WHERE name = 'tgw')`, f.root).Scan(&f.route, &f.vpc, &f.tgw); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool.Exec(ctx, `INSERT INTO resource_deps (dependent_id, dependency_id, owner_id, value_flows) VALUES
		($1, $2, $4, '[{"source_field":"/vpc_id","dependent_field":"/vpc_id"}]'),
		($1, $3, $4, '[{"source_field":"/tgw_id","dependent_field":"/tgw_id"}]')`, f.route, f.vpc, f.tgw, f.root); err != nil {
		t.Fatal(err)
	}
	return f
}

// race runs the tgw's completion and then other (a statement taking one
// id) in two transactions: other starts once the tgw's flow has written
// the route and must wait for it; the tgw's commits only then.
func (f *flowRace) race(other, id string) {
	f.t.Helper()
	ctx := context.Background()
	tgw := func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE resources SET status = '{"tgw_id":"tgw-1"}' WHERE id = $1`, f.tgw); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT substitute_values(ARRAY[$1::uuid])`, f.tgw)
		return err
	}
	if !raceTx(f.t, f.db, tgw, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, other, id); return err }) {
		f.t.Errorf("%s did not wait for the tgw's completion", other)
	}
}

func (f *flowRace) wantRouteSpec(want string) {
	t := f.t
	t.Helper()
	var raw []byte
	if err := f.db.Pool.QueryRow(context.Background(), `SELECT spec FROM resources WHERE id = $1`, f.route).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var got, w map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w) {
		t.Errorf("the route's spec after both writers: %s, want %s", raw, want)
	}
}

// A compose adding an edge while the edge's upstream finishes its task.
// Each can miss the other's uncommitted write: the completion's flow and
// cascade look for edges the compose has not committed, and the compose
// reads a status the completion has not committed. The route would then run
// without the vpc's value, or wait for a sweep to schedule it. Each test
// runs one writer first and holds it open until the other waits for it, with
// the vpc a child of the composing root (the upsert of the vpc meets the
// completion on its row) and a resource of its own (nothing else does).

// TestComposeWaitsForACompletingUpstream: the vpc's completion first.
func TestComposeWaitsForACompletingUpstream(t *testing.T) {
	t.Parallel()
	for _, sibling := range []bool{true, false} {
		t.Run(fmt.Sprintf("sibling=%v", sibling), func(t *testing.T) {
			t.Parallel()
			e := newEdgeRace(t, sibling)
			e.race(e.completeVPC, e.compose)
			e.wantRouteFlowedAndQueued()
		})
	}
}

// TestCompletionWaitsForAComposeAddingItsDependent: the compose first.
func TestCompletionWaitsForAComposeAddingItsDependent(t *testing.T) {
	t.Parallel()
	for _, sibling := range []bool{true, false} {
		t.Run(fmt.Sprintf("sibling=%v", sibling), func(t *testing.T) {
			t.Parallel()
			e := newEdgeRace(t, sibling)
			e.race(e.compose, e.completeVPC)
			e.wantRouteFlowedAndQueued()
		})
	}
}

type edgeRace struct {
	t         *testing.T
	db        *pgtest.Database
	sibling   bool // the vpc is the root's child
	root, vpc string
	task      model.Task // the vpc's, claimed
}

// newEdgeRace makes a composite root and the vpc (its child when sibling),
// whose task is claimed; the route does not exist yet.
func newEdgeRace(t *testing.T, sibling bool) *edgeRace {
	t.Helper()
	ctx := context.Background()
	e := &edgeRace{t: t, db: enginetest.LeafDB(t), sibling: sibling}
	if err := e.db.Pool.QueryRow(ctx, `
		WITH root AS (INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, 'root') RETURNING id),
		     vpc AS (INSERT INTO resources (kind, kind_version, name, owner_id)
		             SELECT 'leaf', 1, 'vpc', CASE WHEN $1 THEN id END FROM root RETURNING id)
		SELECT root.id::text, vpc.id::text FROM root, vpc`, sibling).Scan(&e.root, &e.vpc); err != nil {
		t.Fatal(err)
	}
	e.task = enginetest.ClaimOnly(t, e.db, e.vpc)
	return e
}

// compose is the root's outcome: a route taking the vpc's vpc_id (and the
// vpc, when it is a child).
func (e *edgeRace) compose(tx pgx.Tx) error {
	children := `[{"kind": "leaf", "kind_version": 1, "name": "route"}]`
	if e.sibling {
		children = `[{"kind": "leaf", "kind_version": 1, "name": "route"}, {"kind": "leaf", "kind_version": 1, "name": "vpc"}]`
	}
	_, err := tx.Exec(context.Background(), `SELECT apply_compose($1::uuid, jsonb_build_object('children', $2::jsonb, 'edges', '[
		{"dependent": {"kind": "leaf", "name": "route"}, "dependency": {"kind": "leaf", "name": "vpc"},
		 "values": [{"source_field": "/vpc_id", "dependent_field": "/vpc_id"}]}]'::jsonb), 3)`, e.root, children)
	return err
}

// completeVPC applies the vpc's success, with its vpc_id, as a completion
// does.
func (e *edgeRace) completeVPC(tx pgx.Tx) error {
	return enginetest.CompleteOne(tx, e.task, `{"status": {"vpc_id": "vpc-1"}}`)
}

// race runs first, then second, which must wait for it (raceTx).
func (e *edgeRace) race(first, second func(pgx.Tx) error) {
	e.t.Helper()
	if !raceTx(e.t, e.db, first, second) {
		e.t.Error("the second writer did not wait for the first")
	}
}

// raceTx runs first in a transaction and holds it open while second runs
// in another, until second waits on a lock or ends; then it commits first,
// waits for second and commits it. It reports whether second waited.
func raceTx(t *testing.T, db *pgtest.Database, first, second func(pgx.Tx) error) (waited bool) {
	t.Helper()
	ctx := context.Background()
	tx1, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx1.Rollback(ctx) }()
	tx2, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx2.Rollback(ctx) }()
	if err := first(tx1); err != nil {
		t.Fatalf("first writer: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- second(tx2) }()
	waited = enginetest.WaitForLockWait(t, db, done)
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("second writer: %v", err)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return waited
}

// wantRouteFlowedAndQueued: the route has the vpc's value and a pending
// task for its current generation.
func (e *edgeRace) wantRouteFlowedAndQueued() {
	t := e.t
	t.Helper()
	var spec []byte
	var queued bool
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT r.spec,
		EXISTS (SELECT 1 FROM work_queue w WHERE w.resource_id = r.id AND w.state = 'pending' AND w.generation = r.generation)
		FROM resources r WHERE r.name = 'route'`).Scan(&spec, &queued); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(spec, &got); err != nil {
		t.Fatal(err)
	}
	if got["vpc_id"] != "vpc-1" {
		t.Errorf("the route's spec after both writers: %s, want the vpc's vpc_id", spec)
	}
	if !queued {
		t.Error("the route has no pending task for its generation after both writers")
	}
}

// TestComposeDeadlockRunsTheDrainAgain: a compose waiting for an upstream's
// row while the upstream's writer waits for a child the compose upserted is
// a deadlock, and PostgreSQL rolls one of the two back. If it is the
// compose, the drain runs the batch again; the outcome is not rejected (a
// deadlock is the moment's, not the outcome's).
func TestComposeDeadlockRunsTheDrainAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO kind_manifest (kind, kind_version, reactions)
		VALUES ('comp', 1, '[{"name":"compose","trigger":"specChange","emits":["children","edges","status"]}]')`); err != nil {
		t.Fatal(err)
	}
	var root, child, vpc string
	if err := db.Pool.QueryRow(ctx, `
		WITH root AS (INSERT INTO resources (kind, kind_version, name) VALUES ('comp', 1, 'root') RETURNING id),
		     child AS (INSERT INTO resources (kind, kind_version, name, owner_id, synced_gen) SELECT 'leaf', 1, 'x', id, 1 FROM root RETURNING id),
		     vpc AS (INSERT INTO resources (kind, kind_version, name, synced_gen) VALUES ('leaf', 1, 'vpc', 1) RETURNING id)
		SELECT root.id::text, child.id::text, vpc.id::text FROM root, child, vpc`).Scan(&root, &child, &vpc); err != nil {
		t.Fatal(err)
	}
	// The outcome changes the child x and adds a route taking the vpc's
	// vpc_id: the compose locks x, then waits for the vpc.
	if err := enginetest.CompleteOne(db.Pool, enginetest.ClaimOnly(t, db, root), `{
		"children": [{"kind": "leaf", "kind_version": 1, "name": "x", "spec": {"v": 2}},
		             {"kind": "leaf", "kind_version": 1, "name": "route"}],
		"edges": [{"dependent": {"kind": "leaf", "name": "route"}, "dependency": {"kind": "leaf", "name": "vpc"},
		           "values": [{"source_field": "/vpc_id", "dependent_field": "/vpc_id"}]}]}`); err != nil {
		t.Fatalf("the root's completion: %v", err)
	}

	writer, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = writer.Rollback(ctx) }()
	if _, err := writer.Exec(ctx, `UPDATE resources SET status = '{"vpc_id":"vpc-1"}' WHERE id = $1`, vpc); err != nil {
		t.Fatal(err)
	}
	var n int
	done := make(chan error, 1)
	go func() {
		var err error
		n, err = engine.New(db.Pool, engine.Config{}).OutboxDrain(ctx, engine.DrainParams{Lo: 0, Hi: 255, Limit: 10})
		done <- err
	}()
	if !enginetest.WaitForLockWait(t, db, done) {
		t.Fatalf("the drain ended (%v) without waiting for the vpc", <-done)
	}
	// Close the cycle. The compose waited first, so its deadlock check
	// usually fires first and it is the one rolled back; if the writer is,
	// the compose goes on once the writer's transaction ends.
	if _, err := writer.Exec(ctx, `UPDATE resources SET labels = '{"touched": "yes"}' WHERE id = $1`, child); err != nil {
		if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "40P01" {
			t.Fatalf("the writer's second update: %v", err)
		}
		_ = writer.Rollback(ctx)
	} else if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || n != 1 {
		t.Fatalf("drain: %d applied, %v; want the compose applied", n, err)
	}
	var terminal bool
	var lastError string
	var routes int
	if err := db.Pool.QueryRow(ctx, `SELECT failure_terminal, coalesce(last_error, ''), (SELECT count(*) FROM resources WHERE name = 'route')
		FROM resources WHERE id = $1`, root).Scan(&terminal, &lastError, &routes); err != nil {
		t.Fatal(err)
	}
	if terminal || lastError != "" || routes != 1 {
		t.Errorf("after the deadlock: the root terminal=%v, last_error %q; %d routes; want the compose applied", terminal, lastError, routes)
	}
}
