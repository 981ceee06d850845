package pgrun

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err says the database could not be reached
// or went away, rather than refusing a statement: a failed connect or pool
// acquire (connection refused, DNS, TLS, authentication of the
// connection), a connection that broke mid-statement (reset, closed, cut
// off in the middle of a message), or the server's own shutdown and
// start-up answers (SQLSTATE class 08, 57P01 admin_shutdown, 57P02
// crash_shutdown, 57P03 cannot_connect_now). Only the pgx/pgconn error
// types, the net and syscall errors they wrap, and SQLSTATEs decide.
func Unreachable(err error) bool {
	var (
		ce *pgconn.ConnectError
		pe *pgconn.PgError
		ne *net.OpError
	)
	switch {
	case errors.As(err, &pe):
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	case errors.As(err, &ce), errors.As(err, &ne):
		return true
	case errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return false
}
