package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/convergeplane/converge/control/engine/enginetest"
)

// TestEngineStatementsAreNotJITCompiled: an engine function that plans
// without sequential scans (enable_seqscan off, against plans kept from a
// small table) gives any scan it cannot avoid, of a scratch table or on an
// unindexed condition, the planner's disable cost of 1e10: far above
// jit_above_cost, so PostgreSQL compiled such a statement (the compose's
// edges, the teardown's) at every execution, taking far longer to compile
// than the few milliseconds it runs. Each such function turns JIT off.
func TestEngineStatementsAreNotJITCompiled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := enginetest.LeafDB(t)

	// The rule, from the catalogue.
	var pinned int
	var missing []string
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), coalesce(array_agg(proname::text) FILTER (WHERE NOT proconfig @> '{jit=off}'), '{}')
		FROM pg_proc WHERE proconfig @> '{enable_seqscan=off}'`).Scan(&pinned, &missing); err != nil {
		t.Fatal(err)
	}
	if pinned == 0 {
		t.Fatal("no engine function plans without sequential scans: the rule below checks nothing")
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d functions with enable_seqscan off leave JIT on: %v", len(missing), pinned, missing)
	}

	// The behaviour: a compose with edges, every nested plan logged to the
	// client by auto_explain.
	var available bool
	if err := db.Pool.QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if !available {
		t.Skip("this server has no JIT provider; the catalogue check above ran")
	}
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		plans = append(plans, n.Message)
		mu.Unlock()
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, q := range []string{
		`INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, 'root')`,
		`LOAD 'auto_explain'`,
		`SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`,
		`SET client_min_messages = log`,
		`SELECT apply_compose((SELECT id FROM resources WHERE name = 'root'), jsonb_build_object(
			'children', (SELECT jsonb_agg(jsonb_build_object('kind', 'leaf', 'kind_version', 1, 'name', 'c' || i)) FROM generate_series(1, 20) i),
			'edges', (SELECT jsonb_agg(jsonb_build_object('dependent', jsonb_build_object('kind', 'leaf', 'name', 'c' || i),
			                                               'dependency', jsonb_build_object('kind', 'leaf', 'name', 'c' || i + 1)))
			            FROM generate_series(1, 19) i)), 3)`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var edges, jitted int
	for _, p := range plans {
		if strings.Contains(p, "compose_edges") {
			edges++
		}
		if strings.Contains(p, "JIT:") {
			jitted++
			t.Errorf("a JIT-compiled plan:\n%s", p)
		}
	}
	if edges == 0 {
		t.Fatalf("auto_explain logged %d plans, none of the compose's edges: the check saw nothing", len(plans))
	}
	if jitted > 0 {
		t.Errorf("%d of %d plans logged during the compose were JIT-compiled", jitted, len(plans))
	}
}
