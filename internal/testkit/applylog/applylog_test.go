package applylog_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/convergeplane/converge/internal/testkit/applylog"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestDoubleApplied: the check counts a (resource, generation) whose
// specChange success was applied twice, and only that: a failure, another
// generation, another trigger, or a claimed row removed by something other
// than its own success is not a double apply.
func TestDoubleApplied(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	if err := applylog.Install(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO kind_manifest (kind, kind_version) VALUES ('leaf', 1)`); err != nil {
		t.Fatal(err)
	}
	resource := func(name string) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		if err := db.Pool.QueryRow(ctx, `INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, $1) RETURNING id`,
			name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// apply does what applying a claim's outcome does, in one transaction:
	// the claimed work row goes, and the resource records the claim (or,
	// with recorded false, some other claim's).
	apply := func(rid uuid.UUID, generation, claimEpoch int, trigger string, failed, recorded bool) {
		t.Helper()
		var errText *string
		if failed {
			e := "boom"
			errText = &e
		}
		task, other := uuid.New(), uuid.New()
		recordedID := task
		if !recorded {
			recordedID = other
		}
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`INSERT INTO work_queue (shard_id, resource_id, task_type, task_id, kind, kind_version, state, trigger, generation,
				claimed_gen, claim_epoch) VALUES ((SELECT shard_id FROM resources WHERE id = $1), $1, 'reconcile', $2, 'leaf', 1,
				'claimed', $3, $4, $4, $5)`, []any{rid, task, trigger, generation, claimEpoch}},
			{`DELETE FROM work_queue WHERE resource_id = $1`, []any{rid}},
			{`UPDATE resources SET last_task_id = $2, last_task_epoch = $3, last_error = $4 WHERE id = $1`,
				[]any{rid, recordedID, claimEpoch, errText}},
		} {
			if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		t.Helper()
		n, err := applylog.DoubleApplied(ctx, db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := resource("a"), resource("b")
	apply(a, 1, 1, "specChange", false, true)
	apply(a, 1, 2, "specChange", true, true)   // a failure is not an apply
	apply(a, 1, 3, "specChange", false, false) // removed, not by its own success
	apply(a, 2, 4, "specChange", false, true)
	apply(a, 2, 5, "resync", false, true) // a resync re-runs a synced generation
	apply(b, 1, 1, "specChange", false, true)
	if n := count(); n != 0 {
		t.Fatalf("DoubleApplied = %d before any double apply, want 0", n)
	}
	apply(b, 1, 2, "specChange", false, true)
	if n := count(); n != 1 {
		t.Errorf("DoubleApplied = %d after b's generation 1 was applied twice, want 1", n)
	}
}
