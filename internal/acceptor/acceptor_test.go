package acceptor_test

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/acceptor"
)

// listen returns a loopback listener wrapped with cfg, closed when the test
// ends.
func listen(t *testing.T, cfg acceptor.Config) *acceptor.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := acceptor.New(ln, cfg)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// dial connects to l from the loopback address from ("127.0.0.1",
// "127.0.0.2": Linux answers for all of 127/8).
func dial(t *testing.T, l net.Listener, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// accepted runs Accept in the background: its connection (closed when the
// test ends) or error arrives on the channels.
func accepted(t *testing.T, l net.Listener) (<-chan net.Conn, <-chan error) {
	t.Helper()
	conns, errs := make(chan net.Conn, 1), make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			errs <- err
			return
		}
		t.Cleanup(func() { _ = c.Close() })
		conns <- c
	}()
	return conns, errs
}

func acceptNow(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	conns, errs := accepted(t, l)
	select {
	case c := <-conns:
		return c
	case err := <-errs:
		t.Fatalf("Accept = %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return within 10s")
	}
	return nil
}

// quiet is how long a test watches for something that must not happen: a
// slow machine can only make such a check pass wrongly, never fail wrongly.
const quiet = 200 * time.Millisecond

// TestTotalCapWaits: at MaxConns, Accept takes no further connection until
// an open one closes; the waiting client is then served.
func TestTotalCapWaits(t *testing.T) {
	t.Parallel()
	l := listen(t, acceptor.Config{MaxConns: 2})
	dial(t, l, "127.0.0.1")
	dial(t, l, "127.0.0.1")
	first := acceptNow(t, l)
	acceptNow(t, l)
	dial(t, l, "127.0.0.1")
	conns, errs := accepted(t, l)
	select {
	case <-conns:
		t.Fatal("a third connection was accepted with MaxConns 2 open")
	case err := <-errs:
		t.Fatalf("Accept = %v", err)
	case <-time.After(quiet):
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conns:
	case err := <-errs:
		t.Fatalf("Accept = %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was not accepted once one closed")
	}
	// A second Close of the same connection frees nothing more.
	_ = first.Close()
	dial(t, l, "127.0.0.1")
	conns, errs = accepted(t, l)
	select {
	case <-conns:
		t.Fatal("a connection closed twice freed two slots")
	case err := <-errs:
		t.Fatalf("Accept = %v", err)
	case <-time.After(quiet):
	}
}

// TestPerAddrCap: a connection over its address's cap is closed as soon as
// it is accepted, while other addresses are served; a slot freed by a close
// admits that address again.
func TestPerAddrCap(t *testing.T) {
	t.Parallel()
	l := listen(t, acceptor.Config{MaxConnsPerAddr: 2})
	dial(t, l, "127.0.0.1")
	dial(t, l, "127.0.0.1")
	a := acceptNow(t, l)
	acceptNow(t, l)
	over := dial(t, l, "127.0.0.1")
	dial(t, l, "127.0.0.2")
	other := acceptNow(t, l) // the refused one is skipped, not returned
	if got := other.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.2" {
		t.Fatalf("Accept returned a connection from %s, want the one from 127.0.0.2", got)
	}
	if err := over.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := over.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection over its address's cap read %v, want it closed", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	dial(t, l, "127.0.0.1")
	if c := acceptNow(t, l); c.RemoteAddr().(*net.TCPAddr).IP.String() != "127.0.0.1" {
		t.Fatalf("after a close, Accept returned %s, want 127.0.0.1 admitted again", c.RemoteAddr())
	}
}

// script is a listener whose Accept returns its errors in turn, then the
// connections pushed to conns.
type script struct {
	errs  []error
	conns chan net.Conn
	done  chan struct{}
}

func (s *script) Accept() (net.Conn, error) {
	if len(s.errs) > 0 {
		err := s.errs[0]
		s.errs = s.errs[1:]
		return nil, err
	}
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *script) Close() error   { close(s.done); return nil }
func (s *script) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func opErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// TestPassingErrorsRetried: EMFILE, ENFILE, ECONNABORTED, ENOBUFS and ENOMEM
// are retried until a connection comes; any other error is returned.
func TestPassingErrorsRetried(t *testing.T) {
	t.Parallel()
	server, client := net.Pipe()
	defer client.Close()
	s := &script{errs: []error{opErr(syscall.EMFILE), opErr(syscall.ENFILE), opErr(syscall.ECONNABORTED),
		opErr(syscall.ENOBUFS), opErr(syscall.ENOMEM)}, conns: make(chan net.Conn, 1), done: make(chan struct{})}
	s.conns <- server
	l := acceptor.New(s, acceptor.Config{MaxConns: 1})
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept = %v, want the passing errors retried", err)
	}
	_ = c.Close()

	boom := errors.New("boom")
	l = acceptor.New(&script{errs: []error{boom}, done: make(chan struct{})}, acceptor.Config{MaxConns: 1})
	if _, err := l.Accept(); !errors.Is(err, boom) {
		t.Fatalf("Accept = %v, want the permanent error", err)
	}
	// The failed accepts gave their slots back.
	l = acceptor.New(&script{errs: []error{boom, opErr(syscall.EMFILE)}, conns: make(chan net.Conn, 1), done: make(chan struct{})},
		acceptor.Config{MaxConns: 1})
	_, _ = l.Accept()
	server, client2 := net.Pipe()
	defer client2.Close()
	l.Listener.(*script).conns <- server
	if _, err := l.Accept(); err != nil {
		t.Fatalf("Accept after failures = %v", err)
	}
}

// TestCloseEndsAccept: Close ends an Accept waiting at the cap, and one
// waiting between retries, with net.ErrClosed.
func TestCloseEndsAccept(t *testing.T) {
	t.Parallel()
	t.Run("at the cap", func(t *testing.T) {
		t.Parallel()
		l := listen(t, acceptor.Config{MaxConns: 1})
		dial(t, l, "127.0.0.1")
		acceptNow(t, l)
		_, errs := accepted(t, l)
		_ = l.Close()
		select {
		case err := <-errs:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not end the Accept waiting at the cap")
		}
	})
	t.Run("between retries", func(t *testing.T) {
		t.Parallel()
		errs := make([]error, 100) // 100 EMFILEs: ~90 s of backoff
		for i := range errs {
			errs[i] = opErr(syscall.EMFILE)
		}
		l := acceptor.New(&script{errs: errs, done: make(chan struct{})}, acceptor.Config{})
		_, got := accepted(t, l)
		_ = l.Close()
		select {
		case err := <-got:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not end the Accept backing off")
		}
	})
}
