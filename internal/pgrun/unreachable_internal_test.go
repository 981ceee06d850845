package pgrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnreachable pins the classification behind the API's 503 and the
// read pool's fallback: by pgconn error type and SQLSTATE, never by
// message text.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"admin shutdown 57P01", &pgconn.PgError{Code: "57P01"}, true},
		{"crash shutdown 57P02", &pgconn.PgError{Code: "57P02"}, true},
		{"cannot connect now 57P03", &pgconn.PgError{Code: "57P03"}, true},
		{"connection failure 08006", &pgconn.PgError{Code: "08006"}, true},
		{"connect error", &pgconn.ConnectError{}, true},
		{"connection refused", fmt.Errorf("acquire: %w", refused), true},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"cut off mid-message", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{"conn closed", pgconn.ErrConnClosed, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, false},
		{"deadline", context.DeadlineExceeded, false},
		{"other", errors.New("database is down"), false},
	} {
		if got := Unreachable(tc.err); got != tc.want {
			t.Errorf("%s: Unreachable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
