// Package enginetest holds what the engine's tests and the store's share
// to drive the engine's SQL by hand: a database with a kind to run, a task
// claimed and completed as the dispatcher would, and a wait for a writer
// to block on a lock (the lock-order tests race two writers).
package enginetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// LeafDB is a test database with the kind 'leaf' (one specChange reaction
// that reports a status).
func LeafDB(t *testing.T) *pgtest.Database {
	t.Helper()
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO kind_manifest (kind, kind_version, reactions)
		VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`); err != nil {
		t.Fatal(err)
	}
	return db
}

// ClaimOnly schedules the resource id and claims its task, the only one
// the database has.
func ClaimOnly(t *testing.T, db *pgtest.Database, id string) model.Task {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `SELECT schedule_eligible(ARRAY[$1::uuid])`, id); err != nil {
		t.Fatal(err)
	}
	tasks, err := engine.New(db.Pool, engine.Config{}).TaskClaim(ctx, engine.TaskClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: 10, Lease: time.Minute})
	if err != nil || len(tasks) != 1 || tasks[0].ResourceID != id {
		t.Fatalf("claim: %+v, %v; want the task of %s alone", tasks, err, id)
	}
	return tasks[0]
}

// CompleteOne completes task with a success carrying outcome, through q
// (a pool or a transaction), as a completion does; an outcome that is not
// accepted is an error.
func CompleteOne(q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, task model.Task, outcome string) error {
	// complete_tasks lists the outcomes it did not apply (an outcome that
	// composes is accepted and queued for the drain). A task without its
	// resource is completed as a callback token without one is: NULL.
	var rid any
	if task.ResourceID != "" {
		rid = task.ResourceID
	}
	var notApplied string
	err := q.QueryRow(context.Background(), `SELECT coalesce(string_agg(result, ','), '') FROM complete_tasks(
		ARRAY[$1::uuid], ARRAY[$2::smallint], ARRAY[$3::bigint], ARRAY[$4::uuid], ARRAY[$5::jsonb],
		ARRAY[NULL::text], ARRAY[false], ARRAY[false], 1000, 300000)`,
		task.ID, task.Shard, task.ClaimEpoch, rid, outcome).Scan(&notApplied)
	if err == nil && notApplied != "" {
		err = fmt.Errorf("the completion of %s's task was not accepted: %s", task.ResourceID, notApplied)
	}
	return err
}

// WaitForLockWait polls until a session of db's database waits on a lock
// (true) or done has a value (false, and the value is put back); it fails
// the test after 10 s of neither.
func WaitForLockWait(t *testing.T, db *pgtest.Database, done chan error) bool {
	t.Helper()
	return WaitForLockWaits(t, db, 1, done)
}

// WaitForLockWaits is WaitForLockWait for n sessions waiting at once.
func WaitForLockWaits(t *testing.T, db *pgtest.Database, n int, done chan error) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-done:
			done <- err
			return false
		default:
		}
		var waiting int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d sessions waited on a lock, and the writer watched did not end", n)
		}
	}
}
