package applylog_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/convergeplane/converge/internal/applylog"
	"github.com/convergeplane/converge/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestDoubleApplied: the check counts a (resource, generation) whose
// specChange success was accepted twice, and only that: a failure, another
// generation or another trigger is not a double apply.
func TestDoubleApplied(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	if err := applylog.Install(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	accept := func(resource uuid.UUID, generation, epoch int, trigger string, failed bool) {
		t.Helper()
		var errText *string
		if failed {
			e := "boom"
			errText = &e
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO work_outbox (shard_id, resource_id, task_id, task_type, kind, kind_version,
			trigger, claim_epoch, generation, emits, error) VALUES (0, $1, $2, 'reconcile', 'leaf', 1, $3, $4, $5, 8, $6)`,
			resource, uuid.New(), trigger, epoch, generation, errText); err != nil {
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
	a, b := uuid.New(), uuid.New()
	accept(a, 1, 1, "specChange", false)
	accept(a, 1, 2, "specChange", true) // a failure is not an apply
	accept(a, 2, 3, "specChange", false)
	accept(a, 2, 4, "resync", false) // a resync re-runs a synced generation
	accept(b, 1, 1, "specChange", false)
	if n := count(); n != 0 {
		t.Fatalf("DoubleApplied = %d before any double apply, want 0", n)
	}
	accept(b, 1, 2, "specChange", false)
	if n := count(); n != 1 {
		t.Errorf("DoubleApplied = %d after b's generation 1 was accepted twice, want 1", n)
	}
}
