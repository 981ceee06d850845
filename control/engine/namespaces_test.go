package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/engine/enginetest"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// nsCompose is a composer outcome: the children up and down, down taking
// /v from up's status (a value flow on a dependency edge).
const nsCompose = `{
	"children": [
		{"kind": "leaf", "kind_version": 1, "name": "up"},
		{"kind": "leaf", "kind_version": 1, "name": "down", "spec": {"v": "unset"}}],
	"edges": [
		{"dependent": {"kind": "leaf", "name": "down"}, "dependency": {"kind": "leaf", "name": "up"},
		 "values": [{"source_field": "/v", "dependent_field": "/v"}]}]}`

// nsRoot inserts the root leaf/root in namespace ns and returns its id.
func nsRoot(t *testing.T, db *pgtest.Database, ns string) string {
	t.Helper()
	var id string
	if err := db.Pool.QueryRow(context.Background(), `INSERT INTO resources (namespace, kind, kind_version, name)
		VALUES ($1, 'leaf', 1, 'root') RETURNING id::text`, ns).Scan(&id); err != nil {
		t.Fatalf("insert the root of %s: %v", ns, err)
	}
	return id
}

// TestNamespacesComposeApart: two namespaces each hold leaf/root and
// compose the same children (the same kinds and names) independently:
// each root's children land in its own namespace, its edges join its own
// children, a value flow reads its own upstream, and the queue rows carry
// their resource's namespace.
func TestNamespacesComposeApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO namespaces (name) VALUES ('team-a')`); err != nil {
		t.Fatal(err)
	}
	roots := map[string]string{"default": nsRoot(t, db, "default"), "team-a": nsRoot(t, db, "team-a")}
	for ns, root := range roots {
		if _, err := db.Pool.Exec(ctx, `SELECT apply_compose($1::uuid, $2::jsonb, 3)`, root, nsCompose); err != nil {
			t.Fatalf("compose the root of %s: %v", ns, err)
		}
	}

	rows, err := db.Pool.Query(ctx, `SELECT c.namespace, c.name, r.namespace FROM resources c JOIN resources r ON r.id = c.owner_id
		ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var ns, name, rootNS string
		if err := rows.Scan(&ns, &name, &rootNS); err != nil {
			t.Fatal(err)
		}
		got = append(got, ns+"/"+name+" of "+rootNS)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "default/down of default,default/up of default,team-a/down of team-a,team-a/up of team-a"; strings.Join(got, ",") != want {
		t.Errorf("children = %s; want %s", strings.Join(got, ","), want)
	}

	var crossEdges, crossQueue, queuedA int
	if err := db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM resource_deps d JOIN resources a ON a.id = d.dependent_id JOIN resources b ON b.id = d.dependency_id
		  WHERE a.namespace <> b.namespace),
		(SELECT count(*) FROM work_queue w JOIN resources r ON r.id = w.resource_id WHERE w.namespace <> r.namespace),
		(SELECT count(*) FROM work_queue WHERE namespace = 'team-a')`).Scan(&crossEdges, &crossQueue, &queuedA); err != nil {
		t.Fatal(err)
	}
	if crossEdges != 0 || crossQueue != 0 || queuedA != 1 {
		t.Errorf("%d edges across namespaces, %d queue rows of another namespace than their resource's, %d queued in team-a; "+
			"want 0, 0 and 1 (team-a's up)", crossEdges, crossQueue, queuedA)
	}

	// Each upstream reports its own value; recomposing team-a flows team-a's
	// into team-a's down, and the default namespace's stays as it was.
	if _, err := db.Pool.Exec(ctx, `UPDATE resources SET status = jsonb_build_object('v', namespace) WHERE name = 'up'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT apply_compose($1::uuid, $2::jsonb, 3)`, roots["team-a"], nsCompose); err != nil {
		t.Fatalf("recompose team-a: %v", err)
	}
	specs := map[string]string{}
	rows, err = db.Pool.Query(ctx, `SELECT namespace, spec->>'v' FROM resources WHERE name = 'down'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ns, v string
		if err := rows.Scan(&ns, &v); err != nil {
			t.Fatal(err)
		}
		specs[ns] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if specs["team-a"] != "team-a" || specs["default"] != "unset" {
		t.Errorf("down's /v by namespace = %v; want team-a's from team-a's up, default's unset", specs)
	}
}

// TestNamespacesFlowCannotCross: an edge naming a resource that exists
// only in another namespace names nothing: the compose fails as for a
// resource that does not exist, and writes nothing.
func TestNamespacesFlowCannotCross(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO namespaces (name) VALUES ('team-a');
		INSERT INTO resources (kind, kind_version, name, status) VALUES ('leaf', 1, 'common', '{"v": "default"}')`); err != nil {
		t.Fatal(err)
	}
	root := nsRoot(t, db, "team-a")
	_, err := db.Pool.Exec(ctx, `SELECT apply_compose($1::uuid, '{
		"children": [{"kind": "leaf", "kind_version": 1, "name": "down"}],
		"edges": [{"dependent": {"kind": "leaf", "name": "down"}, "dependency": {"kind": "leaf", "name": "common"},
		           "values": [{"source_field": "/v", "dependent_field": "/v"}]}]}', 3)`, root)
	if err == nil || !strings.Contains(err.Error(), "an edge names a resource that does not exist") {
		t.Fatalf("compose with an edge into the default namespace: %v; want the edge refused", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM resources WHERE owner_id = $1`, root).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the refused compose left %d children", n)
	}
}

// TestNamespacesBindingsWatchTheirOwn: a reactor binding fires for the
// resources of its own namespace only.
func TestNamespacesBindingsWatchTheirOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	var ids []string
	err := func() error {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO namespaces (name) VALUES ('team-a');
			INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('sink', 1, '[{"name":"react","trigger":"reactor","emits":["sideEffect"]}]');
			INSERT INTO reactor_bindings (name, namespace, watch_kind, transition, reactor) VALUES ('a-created', 'team-a', 'leaf', 'created', 'sink')`); err != nil {
			return err
		}
		rows, err := db.Pool.Query(ctx, `INSERT INTO resources (namespace, kind, kind_version, name)
			VALUES ('default', 'leaf', 1, 'x'), ('team-a', 'leaf', 1, 'x') RETURNING id::text`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		_, err = db.Pool.Exec(ctx, `SELECT emit_lifecycle($1::uuid[], 'created')`, ids)
		return err
	}()
	if err != nil {
		t.Fatal(err)
	}
	var fired []string
	rows, err := db.Pool.Query(ctx, `SELECT r.namespace FROM lifecycle_outbox l JOIN resources r ON r.id = l.resource_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ns string
		if err := rows.Scan(&ns); err != nil {
			t.Fatal(err)
		}
		fired = append(fired, ns)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(fired, ",") != "team-a" {
		t.Errorf("team-a's binding fired for the resources of %v; want team-a's alone", fired)
	}
}
