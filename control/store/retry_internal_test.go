package store

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/convergeplane/converge/internal/pgrun"
)

// TestDeadlockedApplyRunsAgain: an apply PostgreSQL rolled back to break a
// deadlock maps to errRetry, so its write loop runs it again.
func TestDeadlockedApplyRunsAgain(t *testing.T) {
	t.Parallel()
	deadlock := &pgconn.PgError{Code: pgrun.CodeDeadlockDetected}
	if err := resourceWriteError(deadlock, ApplyResourceParams{Kind: "k", Name: "n"}); !errors.Is(err, errRetry) {
		t.Errorf("a deadlocked apply maps to %v, want errRetry", err)
	}
}
