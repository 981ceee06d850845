package engine

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestClaimReturnsTheResourceTheRequestReads: a claim returns each work
// task's resource (claim_tasks' r_* columns, claimedResourceCols), and
// RequestBuild builds the task's request from it instead of reading the
// resource again. So the claim's copy must be the resource as
// resourceCols reads it, column for column, and the request built from the
// claim the one built by reading: for a leaf with every column set (labels,
// spec, status, an owner, a provider config override, an error, counters
// apart) and for a bare one (no status, owner or override).
func TestClaimReturnsTheResourceTheRequestReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	var full, bare string
	for _, q := range []string{
		`INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`,
		`INSERT INTO providerconfigs (name, kind, kind_version, is_default, spec, data)
		 VALUES ('leaf-default', 'leaf', 1, true, '{"region": "eu", "size": 1}', '\x01'),
		        ('big', 'leaf', 1, false, '{"size": 2}', '\x0203')`,
		`INSERT INTO resources (kind, kind_version, name, synced_gen) VALUES ('leaf', 1, 'parent', 1)`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Pool.QueryRow(ctx, `
		WITH f AS (INSERT INTO resources (kind, kind_version, name, labels, spec, status, owner_id, provider_config_ref,
		                                  generation, synced_gen, health_ok, failure_gen, last_error)
		           SELECT 'leaf', 1, 'full', '{"team": "a"}', '{"n": 1, "s": "x"}', '{"ok": false, "n": 7}', p.id, 'big',
		                  5, 3, false, 4, 'boom'
		             FROM resources p WHERE p.name = 'parent'
		           RETURNING id),
		     b AS (INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, 'bare') RETURNING id)
		SELECT f.id::text, b.id::text FROM f, b`).Scan(&full, &bare); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT schedule_eligible(ARRAY[$1::uuid, $2::uuid])`, full, bare); err != nil {
		t.Fatal(err)
	}
	eng := New(db.Pool, Config{})
	tasks, err := eng.TaskClaim(ctx, TaskClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: 10, Lease: time.Minute})
	if err != nil || len(tasks) != 2 {
		t.Fatalf("claim: %d tasks, %v; want the tasks of full and bare", len(tasks), err)
	}

	read, err := pgrun.Collect(ctx, db.Pool, scanResource, `SELECT `+resourceCols+` FROM resources r WHERE r.id = ANY ($1)`,
		[]string{full, bare})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]model.Resource{}
	for _, r := range read {
		byID[r.ID] = r
	}
	unclaimed := make([]model.Task, len(tasks))
	for i, task := range tasks {
		if task.Resource == nil {
			t.Fatalf("the claim returned no resource with the task of %s", task.ResourceID)
		}
		if diff := cmp.Diff(byID[task.ResourceID], *task.Resource); diff != "" {
			t.Errorf("the claim's resource %s differs from the read's (-read +claim):\n%s", task.ResourceID, diff)
		}
		unclaimed[i] = task
		unclaimed[i].Resource = nil
	}

	fromClaim, failed, err := eng.RequestBuild(ctx, tasks)
	if err != nil || failed[0] != nil || failed[1] != nil {
		t.Fatalf("build from the claim: %v, %v", failed, err)
	}
	byRead, failed, err := eng.RequestBuild(ctx, unclaimed)
	if err != nil || failed[0] != nil || failed[1] != nil {
		t.Fatalf("build by reading: %v, %v", failed, err)
	}
	if diff := cmp.Diff(byRead, fromClaim); diff != "" {
		t.Errorf("the requests built from the claim differ from those built by reading (-read +claim):\n%s", diff)
	}
	for _, env := range fromClaim {
		if env.Resource.ID == full && string(env.Bundle) != "\x02\x03" {
			t.Errorf("full's request carries bundle %q, want its override's", env.Bundle)
		}
	}
}
