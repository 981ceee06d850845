package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/engine/enginetest"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// fairDB is a leaf database with the namespaces team-a and team-b, and n
// pending leaf tasks in each namespace of counts, scheduled in the order
// given (the first namespace's backlog queued before the others').
func fairDB(t *testing.T, counts ...any) *pgtest.Database {
	t.Helper()
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	exec(t, db, `INSERT INTO namespaces (name) VALUES ('team-a'), ('team-b')`)
	for i := 0; i < len(counts); i += 2 {
		ns, n := counts[i].(string), counts[i+1].(int)
		exec(t, db, fmt.Sprintf(`INSERT INTO resources (namespace, kind, kind_version, name)
			SELECT '%s', 'leaf', 1, 'l-' || i FROM generate_series(1, %d) i`, ns, n))
		if _, err := db.Pool.Exec(ctx, `SELECT schedule_eligible(array_agg(id)) FROM resources WHERE namespace = $1`, ns); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func exec(t *testing.T, db *pgtest.Database, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func claim(t *testing.T, db *pgtest.Database, limit int) []model.Task {
	t.Helper()
	tasks, err := engine.New(db.Pool, engine.Config{}).TaskClaim(context.Background(),
		engine.TaskClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: limit, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

func claimPairs(t *testing.T, db *pgtest.Database, limit int, pairs, own []string) []model.Task {
	t.Helper()
	tasks, err := engine.New(db.Pool, engine.Config{}).TaskClaim(context.Background(),
		engine.TaskClaimParams{Claimer: "t", Lo: 0, Hi: 255, Pairs: pairs, Own: own, Limit: limit, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

func byNamespace(tasks []model.Task) map[string]int {
	n := map[string]int{}
	for _, task := range tasks {
		n[task.Namespace]++
	}
	return n
}

// TestClaimsShareTheBatchBetweenNamespaces: a namespace whose few tasks
// were queued behind another's deep backlog gets at least floor(limit / 2)
// of the next batch (each of k namespaces with claimable tasks gets at
// least floor(limit / k)), the default namespace like any other, and so
// does a capped kind's budget; what a namespace leaves unused fills the
// batch.
func TestClaimsShareTheBatchBetweenNamespaces(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		big, small string
		kindCap    int
		limit      int
	}{
		{"two teams", "team-a", "team-b", 0, 20},
		{"default's backlog", "default", "team-b", 0, 20},
		{"behind team-a's backlog, default", "team-a", "default", 0, 20},
		{"a capped kind's budget", "team-a", "team-b", 10, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := fairDB(t, tc.big, 300, tc.small, 30)
			if tc.kindCap > 0 {
				exec(t, db, `UPDATE kind_config SET max_inflight = $1 WHERE kind = 'leaf'`, tc.kindCap)
			}
			want := tc.limit
			if tc.kindCap > 0 {
				want = tc.kindCap
			}
			got := byNamespace(claim(t, db, tc.limit))
			if got[tc.big]+got[tc.small] != want {
				t.Fatalf("the claim took %v; want %d tasks", got, want)
			}
			if got[tc.small] < want/2 {
				t.Errorf("the claim took %v: %s, queued behind %s's backlog, got %d; want at least %d (half the batch)",
					got, tc.small, tc.big, got[tc.small], want/2)
			}
		})
	}
	t.Run("a dispatcher's pairs", func(t *testing.T) {
		t.Parallel()
		db := fairDB(t, "team-a", 300, "team-b", 30)
		got := byNamespace(claimPairs(t, db, 20, []string{"leaf/1"}, nil))
		if got["team-a"] != 10 || got["team-b"] != 10 {
			t.Errorf("the claim took %v; want 10 of each", got)
		}
		// team-a serves leaf itself and its endpoints are not ready: the
		// default namespace's endpoints take team-b's tasks only.
		got = byNamespace(claimPairs(t, db, 20, []string{"leaf/1"}, []string{"team-a:leaf/1"}))
		if got["team-a"] != 0 || got["team-b"] != 20 {
			t.Errorf("with team-a's own endpoints unready the claim took %v; want team-b's 20 alone", got)
		}
		got = byNamespace(claimPairs(t, db, 20, []string{"team-a:leaf/1"}, []string{"team-a:leaf/1"}))
		if got["team-a"] != 20 || got["team-b"] != 0 {
			t.Errorf("for team-a's own endpoints the claim took %v; want team-a's 20 alone", got)
		}
	})
	t.Run("what one leaves fills the batch", func(t *testing.T) {
		t.Parallel()
		db := fairDB(t, "team-a", 300, "team-b", 3)
		got := byNamespace(claim(t, db, 20))
		if got["team-b"] != 3 || got["team-a"] != 17 {
			t.Errorf("the claim took %v; want team-b's 3 and 17 of team-a's", got)
		}
	})
}

// TestNamespaceMaxInFlightHoldsAndIsReleased: a namespace's max_in_flight
// bounds its claimed tasks across claims, and a completion, a release and
// an expired lease each give its token back; the other namespace is not
// held by it.
func TestNamespaceMaxInFlightHoldsAndIsReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := fairDB(t, "team-a", 50, "team-b", 20)
	exec(t, db, `UPDATE namespaces SET max_in_flight = 3 WHERE name = 'team-b'`)
	eng := engine.New(db.Pool, engine.Config{})
	var held []model.Task // team-b's claimed tasks
	take := func(wantB int) {
		t.Helper()
		tasks := claim(t, db, 10)
		got := byNamespace(tasks)
		if got["team-b"] != wantB {
			t.Fatalf("the claim took %v; want %d of team-b's", got, wantB)
		}
		for _, task := range tasks {
			if task.Namespace == "team-b" {
				held = append(held, task)
			}
		}
		var tokens, claimed int
		if err := db.Pool.QueryRow(ctx, `SELECT (SELECT coalesce(sum(in_flight), 0) FROM namespace_inflight WHERE namespace = 'team-b'),
			(SELECT count(*) FROM work_queue WHERE namespace = 'team-b' AND state = 'claimed')`).Scan(&tokens, &claimed); err != nil {
			t.Fatal(err)
		}
		if tokens != claimed || claimed > 3 {
			t.Fatalf("team-b: %d tokens out for %d claimed tasks; want as many, at most 3", tokens, claimed)
		}
	}
	take(3)
	take(0) // at its cap: team-a takes the batch
	if err := enginetest.CompleteOne(db.Pool, held[0], `{"status": {}}`); err != nil {
		t.Fatal(err)
	}
	take(1)
	if err := eng.TaskRelease(ctx, engine.TaskReleaseParams{Tasks: held[1:2], Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	take(1)
	exec(t, db, `UPDATE work_queue SET lease_until = now() - interval '1 second' WHERE task_id = $1`, held[2].ID)
	exec(t, db, `SELECT reap_expired_leases(0, 255, 100)`)
	take(1)
	exec(t, db, `UPDATE namespaces SET max_in_flight = NULL WHERE name = 'team-b'`)
	exec(t, db, `SELECT recount_inflight(0, 255)`)
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM namespace_inflight`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d namespace_inflight rows left once no namespace is capped; want none", rows)
	}
	if got := byNamespace(claim(t, db, 40)); got["team-b"] < 5 {
		t.Errorf("uncapped, the claim took %v; want team-b's remaining tasks", got)
	}
}
