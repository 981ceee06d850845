package migrations_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/migrations"
)

// beforeNamespaces is the last numbered migration before namespaces.
const beforeNamespaces = 32

// namespacedTables are the tables 00033 gives a namespace column, with
// the columns that order their rows.
var namespacedTables = map[string]string{
	"resources":           "id",
	"providerconfigs":     "name",
	"reactor_bindings":    "name",
	"endpoints":           "name",
	"endpoint_deliveries": "id",
	"work_queue":          "resource_id, task_type",
}

// TestUpgradeIntoDefaultNamespace: a database holding resources (a
// composite and its children, an edge, a task), provider configs, a
// reactor binding, an endpoint and its delivery log, at the migration
// before namespaces, upgrades in place: every row is kept as it was, and
// every one of them is in the default namespace, which is the only one.
// The same kind and name can then be created in another namespace.
func TestUpgradeIntoDefaultNamespace(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db := pgtest.NewEmpty(t)
	upTo(t, db, beforeNamespaces)
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES
		    ('widget', 1, '[{"name": "make", "trigger": "specChange", "emits": ["status", "children"]}]'),
		    ('sink', 1, '[{"name": "react", "trigger": "reactor", "emits": ["sideEffect"]}]');
		INSERT INTO providerconfigs (name, kind, kind_version, is_default, spec) VALUES
		    ('widget-default', 'widget', 1, true, '{"region": "eu"}'),
		    ('widget-big', 'widget', 1, false, '{"size": "big"}');
		WITH root AS (
		    INSERT INTO resources (kind, kind_version, name, spec, provider_config_ref)
		    VALUES ('widget', 1, 'root', '{"n": 1}', 'widget-big') RETURNING id)
		INSERT INTO resources (kind, kind_version, name, spec, owner_id)
		SELECT 'widget', 1, c, '{"n": 2}', root.id FROM root, unnest(ARRAY['a', 'b']) c;
		INSERT INTO resource_deps (dependent_id, dependency_id, owner_id, value_flows)
		SELECT a.id, b.id, a.owner_id, '[{"source_field": "/x", "dependent_field": "/x"}]'
		  FROM resources a, resources b WHERE a.name = 'a' AND b.name = 'b';
		INSERT INTO work_queue (shard_id, resource_id, task_type, kind, kind_version, generation)
		SELECT shard_id, id, 'reconcile', kind, kind_version, generation FROM resources WHERE name = 'root';
		INSERT INTO reactor_bindings (name, watch_kind, transition, reactor) VALUES ('on-sync', 'widget', 'synced', 'sink');
		INSERT INTO endpoints (name, kinds, target, secret_enc)
		VALUES ('ep', '[{"kind": "widget", "kind_version": 1}]', '{"type": "https", "url": "https://p.example/"}', '\x00');
		INSERT INTO endpoint_deliveries (endpoint, task_id, resource_id, kind, name, task_type, claim_epoch, attempt,
		                                 latency_ms, classification)
		SELECT 'ep', gen_random_uuid(), id, kind, name, 'reconcile', 1, 1, 5, 'ok' FROM resources WHERE name = 'root'`); err != nil {
		t.Fatalf("fill the database at %d: %v", beforeNamespaces, err)
	}
	before := rowsOf(t, db, "")

	if err := migrations.Up(ctx, db.DSN, nil); err != nil {
		t.Fatalf("Up: %v", err)
	}

	after := rowsOf(t, db, "namespace")
	for _, table := range slices.Sorted(maps.Keys(namespacedTables)) {
		if len(before[table]) == 0 {
			t.Errorf("the fixture holds no %s", table)
		}
		if !slices.Equal(before[table], after[table]) {
			t.Errorf("%s changed in the upgrade:\nbefore %v\nafter  %v", table, before[table], after[table])
		}
	}
	var outside int
	var names []string
	if err := db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM resources WHERE namespace <> 'default') + (SELECT count(*) FROM providerconfigs WHERE namespace <> 'default') +
		(SELECT count(*) FROM reactor_bindings WHERE namespace <> 'default') + (SELECT count(*) FROM endpoints WHERE namespace <> 'default') +
		(SELECT count(*) FROM work_queue WHERE namespace <> 'default') + (SELECT count(*) FROM endpoint_deliveries WHERE namespace <> 'default'),
		(SELECT array_agg(name ORDER BY name) FROM namespaces)`).Scan(&outside, &names); err != nil {
		t.Fatal(err)
	}
	if outside != 0 || !slices.Equal(names, []string{"default"}) {
		t.Errorf("after the upgrade %d rows are outside default and the namespaces are %v; want none, and default alone", outside, names)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO namespaces (name) VALUES ('team-a');
		INSERT INTO resources (namespace, kind, kind_version, name) VALUES ('team-a', 'widget', 1, 'root')`); err != nil {
		t.Errorf("the same kind and name in another namespace: %v", err)
	}
}

// upTo applies the embedded numbered migrations up to version to, as a
// release that ended there did (its engine is not applied: Up applies the
// current one).
func upTo(t *testing.T, db *pgtest.Database, to int64) {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDB(*cfg)
	defer sqlDB.Close() // test cleanup
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS(), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctxT(t), to); err != nil {
		t.Fatalf("apply the migrations up to %d: %v", to, err)
	}
}

// rowsOf reads every row of the namespaced tables as JSON text, without
// the column drop (so rows from before and after a migration that added
// it compare).
func rowsOf(t *testing.T, db *pgtest.Database, drop string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for table, order := range namespacedTables {
		rows, err := db.Pool.Query(context.Background(), `SELECT (to_jsonb(t) - $1::text)::text FROM `+table+` t ORDER BY `+order, drop)
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		out[table], err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
	}
	return out
}
