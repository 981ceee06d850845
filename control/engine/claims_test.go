package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/engine/enginetest"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestCappedClaimRacingACompletionDoesNotDeadlock: a completion of a capped
// kind's task gives the kind its token back, and a claim of that kind
// takes one; meanwhile the completion applies its outcome, which writes
// other resources' work rows, and the claim locks the pending rows it
// picks. A completion that gave the token back before applying (holding
// the kind_inflight row while it applied) and then met a row the claim had
// picked closed a cycle: the claim waited for the token's row, the
// completion for the picked row, and PostgreSQL broke it after
// deadlock_timeout, costing the claim (the large classic demo met it
// often). Here the upstream's completion flows its status into a dependent
// that an apply holds; while the completion waits for it, a claim takes
// the dependent's pending resync, of the same capped kind; then the apply
// commits and the completion schedules the dependent, on the claimed row.
// The token's row is the last thing a completion locks, so the claim takes
// the token without waiting and the completion then writes the claimed
// row: both go through.
func TestCappedClaimRacingACompletionDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	if _, err := db.Pool.Exec(ctx, `UPDATE kind_config SET max_inflight = 10 WHERE kind = 'leaf'`); err != nil {
		t.Fatal(err)
	}
	var up, dep string
	if err := db.Pool.QueryRow(ctx, `
		WITH up AS (INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, 'up') RETURNING id),
		     dep AS (INSERT INTO resources (kind, kind_version, name, spec_gen, synced_gen) VALUES ('leaf', 1, 'dep', 1, 1) RETURNING id),
		     edge AS (INSERT INTO resource_deps (dependent_id, dependency_id, value_flows)
		              SELECT dep.id, up.id, '[{"source_field": "/v", "dependent_field": "/v"}]' FROM up, dep)
		SELECT up.id::text, dep.id::text FROM up, dep`).Scan(&up, &dep); err != nil {
		t.Fatal(err)
	}
	task := enginetest.ClaimOnly(t, db, up) // takes the kind's first token
	if _, err := db.Pool.Exec(ctx, `SELECT enqueue_reconcile(ARRAY[$1::uuid], ARRAY['resync'])`, dep); err != nil {
		t.Fatal(err)
	}

	apply, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = apply.Rollback(ctx) }()
	if _, err := apply.Exec(ctx, `UPDATE resources SET labels = '{"team": "a"}' WHERE id = $1`, dep); err != nil {
		t.Fatal(err)
	}
	completed := make(chan error, 1)
	go func() { completed <- enginetest.CompleteOne(db.Pool, task, `{"status": {"v": 1}}`) }()
	if !enginetest.WaitForLockWait(t, db, completed) {
		t.Fatalf("the completion did not wait for the apply holding its dependent: %v", <-completed)
	}
	var claimedIDs []string
	claimed := make(chan error, 1)
	go func() {
		claimed <- db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(resource_id::text), '{}') FROM claim_tasks('t', 0, 255, NULL, NULL, 10, 60)`).
			Scan(&claimedIDs)
	}()
	// Before the fix the claim waited here for the completion's token row.
	enginetest.WaitForLockWaits(t, db, 2, claimed)
	if err := apply.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-completed; err != nil {
		t.Errorf("the completion: %v", err)
	}
	if err := <-claimed; err != nil {
		t.Fatalf("the claim: %v", err)
	}

	if len(claimedIDs) != 1 || claimedIDs[0] != dep {
		t.Errorf("the claim took %v; want the dependent's resync (%s)", claimedIDs, dep)
	}
	var inFlight int
	var spec string
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT sum(in_flight) FROM kind_inflight WHERE kind = 'leaf'),
		(SELECT spec::text FROM resources WHERE id = $1)`, dep).Scan(&inFlight, &spec); err != nil {
		t.Fatal(err)
	}
	if inFlight != 1 {
		t.Errorf("leaf has %d tokens out; want 1 (the claimed resync's; the completion gave its own back)", inFlight)
	}
	if spec != `{"v": 1}` {
		t.Errorf("the dependent's spec: %s; want the upstream's value", spec)
	}
}

// TestTokenRowsAreTakenInKeyOrder: a claim spends, and a completion gives
// back, the tokens of several capped kinds in one statement; each locks
// their kind_inflight rows in key order, so one waiting for a row holds no
// row after it, and a claim and a completion sharing two kinds cannot each
// hold the one the other waits for. Another session holds the first row
// while the writer runs: the writer waits for it, and the second row stays
// free meanwhile.
func TestTokenRowsAreTakenInKeyOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		write func(*testing.T, *engine.Engine, []model.Task) error
	}{
		{"claim", func(t *testing.T, eng *engine.Engine, _ []model.Task) error {
			tasks, err := eng.TaskClaim(context.Background(), engine.TaskClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: 10, Lease: time.Minute})
			if err == nil && len(tasks) != 2 {
				t.Errorf("the claim took %d tasks, want both", len(tasks))
			}
			return err
		}},
		{"completion", func(t *testing.T, eng *engine.Engine, tasks []model.Task) error {
			cs := make([]engine.Completion, len(tasks))
			for i, task := range tasks {
				cs[i] = engine.Completion{Task: task, Result: webhooksdk.Result{Outcome: &webhooksdk.Outcome{}}}
			}
			got, err := eng.TaskCompleteMany(context.Background(), cs)
			if err == nil && (got[0] != engine.Applied || got[1] != engine.Applied) {
				t.Errorf("the completion: %v, want both applied", got)
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := enginetest.LeafDB(t)
			eng := engine.New(db.Pool, engine.Config{})
			// Two capped kinds, leaf before vpc in key order, a task each.
			if _, err := db.Pool.Exec(ctx, `
				INSERT INTO kind_manifest (kind, kind_version, reactions)
				VALUES ('vpc', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]');
				UPDATE kind_config SET max_inflight = 10;
				INSERT INTO kind_inflight (kind, kind_version, range_lo) VALUES ('leaf', 1, 0), ('vpc', 1, 0);
				WITH r AS (INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, 'a'), ('vpc', 1, 'b') RETURNING id)
				SELECT schedule_eligible(array_agg(id)) FROM r`); err != nil {
				t.Fatal(err)
			}
			var tasks []model.Task
			if tc.name == "completion" {
				var err error
				if tasks, err = eng.TaskClaim(ctx, engine.TaskClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: 10, Lease: time.Minute}); err != nil || len(tasks) != 2 {
					t.Fatalf("claim: %d tasks, %v; want both", len(tasks), err)
				}
			}

			holder, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = holder.Rollback(ctx) }()
			if _, err := holder.Exec(ctx, `SELECT 1 FROM kind_inflight WHERE kind = 'leaf' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- tc.write(t, eng, tasks) }()
			if !enginetest.WaitForLockWait(t, db, done) {
				t.Fatalf("the %s did not wait for leaf's token row: %v", tc.name, <-done)
			}
			probe, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := probe.Exec(ctx, `SELECT 1 FROM kind_inflight WHERE kind = 'vpc' FOR UPDATE NOWAIT`); err != nil {
				t.Errorf("vpc's token row while the %s waits for leaf's: %v; want it free (taken after leaf's)", tc.name, err)
			}
			_ = probe.Rollback(ctx)
			if err := holder.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the %s: %v", tc.name, err)
			}
		})
	}
}
