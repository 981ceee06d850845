package store_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/pgtest"
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
	f := &flowRace{t: t, db: pgtest.New(t)}
	if _, err := f.db.Pool.Exec(ctx, `INSERT INTO kind_manifest (kind, kind_version, reactions)
		VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`); err != nil {
		t.Fatal(err)
	}
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
	t := f.t
	t.Helper()
	ctx := context.Background()
	first, err := f.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback(ctx) }()
	second, err := f.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.Rollback(ctx) }()
	if _, err := first.Exec(ctx, `UPDATE resources SET status = '{"tgw_id":"tgw-1"}' WHERE id = $1`, f.tgw); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, `SELECT substitute_values(ARRAY[$1::uuid])`, f.tgw); err != nil {
		t.Fatalf("the tgw's flow: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := second.Exec(ctx, other, id)
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never waited for the tgw's completion", other)
		}
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("%s: %v", other, err)
	}
	if err := second.Commit(ctx); err != nil {
		t.Fatal(err)
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
