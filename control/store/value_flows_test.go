package store_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/internal/pgtest"
)

// TestConcurrentFlowsIntoOneDependentBothLand: two upstreams of one
// dependent finish in overlapping transactions, each flowing its own field
// into the dependent's spec. The second waits for the first's row and must
// write on top of what the first committed, not put back the spec it read
// before (the classic demo's route lost its tgw_id to its vpc's flow that
// way, and ran without it).
func TestConcurrentFlowsIntoOneDependentBothLand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO kind_manifest (kind, kind_version, reactions)
		VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`); err != nil {
		t.Fatal(err)
	}
	var ids [3]string // the dependent, then its two upstreams
	if err := db.Pool.QueryRow(ctx, `
		WITH r AS (INSERT INTO resources (kind, kind_version, name, spec, status)
		           SELECT 'leaf', 1, n, '{}', s::jsonb
		             FROM (VALUES ('route', NULL), ('vpc', '{"vpc_id":"vpc-1"}'), ('tgw', '{"tgw_id":"tgw-1"}')) v(n, s)
		           RETURNING id, name)
		SELECT (SELECT id::text FROM r WHERE name = 'route'), (SELECT id::text FROM r WHERE name = 'vpc'),
		       (SELECT id::text FROM r WHERE name = 'tgw')`).Scan(&ids[0], &ids[1], &ids[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO resource_deps (dependent_id, dependency_id, value_flows) VALUES
		($1, $2, '[{"source_field":"/vpc_id","dependent_field":"/vpc_id"}]'),
		($1, $3, '[{"source_field":"/tgw_id","dependent_field":"/tgw_id"}]')`, ids[0], ids[1], ids[2]); err != nil {
		t.Fatal(err)
	}

	begin := func() pgx.Tx {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		return tx
	}
	first, second := begin(), begin()
	if _, err := first.Exec(ctx, `SELECT substitute_values(ARRAY[$1::uuid])`, ids[2]); err != nil {
		t.Fatalf("tgw's flow: %v", err)
	}
	// The vpc's flow takes its snapshot now, before the tgw's commits, and
	// then waits for the route's row.
	done := make(chan error, 1)
	go func() {
		_, err := second.Exec(ctx, `SELECT substitute_values(ARRAY[$1::uuid])`, ids[1])
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the vpc's flow never waited for the route's row")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("vpc's flow: %v", err)
	}
	if err := second.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	var raw []byte
	if err := db.Pool.QueryRow(ctx, `SELECT spec FROM resources WHERE id = $1`, ids[0]).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"vpc_id": "vpc-1", "tgw_id": "tgw-1"}; !reflect.DeepEqual(spec, want) {
		t.Errorf("route's spec after both flows: %s, want both fields", raw)
	}
}
