package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestReadPoolUnreachable: only a read pool that cannot be reached is
// skipped, for ReadPoolRetry, and counted; a statement it refuses, or a
// read whose own context ended, is neither.
func TestReadPoolUnreachable(t *testing.T) {
	t.Parallel()
	r := &readPool{}
	if !r.usable() {
		t.Fatal("a new read pool is not usable")
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
	}{
		{"statement timeout 57014", t.Context(), &pgconn.PgError{Code: "57014"}},
		{"recovery conflict 40001", t.Context(), &pgconn.PgError{Code: "40001"}},
		{"other", t.Context(), errors.New("scan: wrong type")},
		{"connect error, caller gone", ended, &pgconn.ConnectError{}},
	} {
		if r.unreachable(tc.ctx, tc.err) || !r.usable() || r.fallbacks.Load() != 0 {
			t.Errorf("%s: the read pool was taken for unreachable", tc.name)
		}
	}
	for i, tc := range []struct {
		name string
		err  error
	}{{"connect error", &pgconn.ConnectError{}}, {"admin shutdown 57P01", &pgconn.PgError{Code: "57P01"}}} {
		if !r.unreachable(t.Context(), tc.err) || r.usable() || r.fallbacks.Load() != uint64(i+1) {
			t.Errorf("%s: the read pool was not skipped and counted", tc.name)
		}
		if until := time.Unix(0, r.skipUntil.Load()); time.Until(until) > ReadPoolRetry {
			t.Errorf("skipped until %s, more than ReadPoolRetry from now", until)
		}
		r.skipUntil.Store(time.Now().Add(-time.Nanosecond).UnixNano()) // the window has passed
		if !r.usable() {
			t.Error("the read pool is not tried again once ReadPoolRetry has passed")
		}
	}
}
