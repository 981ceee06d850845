package pgrun

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRetryDeadlock: a transaction PostgreSQL rolled back to break a
// deadlock runs again, up to deadlockAttempts; any other error is returned
// at once.
func TestRetryDeadlock(t *testing.T) {
	t.Parallel()
	deadlock := &pgconn.PgError{Code: CodeDeadlockDetected}
	for _, tc := range []struct {
		name      string
		fails     int   // deadlocks before success
		other     error // returned instead, if set
		wantCalls int
		wantErr   bool
	}{
		{"succeeds at once", 0, nil, 1, false},
		{"deadlocked once", 1, nil, 2, false},
		{"deadlocked every time", 100, nil, deadlockAttempts, true},
		{"another error", 0, errors.New("boom"), 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := RetryDeadlock(func() error {
				calls++
				if tc.other != nil {
					return tc.other
				}
				if calls <= tc.fails {
					return deadlock
				}
				return nil
			})
			if calls != tc.wantCalls || (err != nil) != tc.wantErr {
				t.Errorf("calls %d, err %v; want %d calls, error %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}
