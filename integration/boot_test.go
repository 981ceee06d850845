package integration

import (
	"crypto/rand"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/internal/testkit/testnet"
)

// TestStartWaitsForTheDatabase: a converge process started before its
// database accepts connections retries for DATABASE_WAIT instead of exiting;
// it gives up once the wait is spent, and at once on a refusal a retry
// cannot fix.
func TestStartWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{noDrain: true})
	key := func() []byte { b := make([]byte, 32); _, _ = rand.Read(b); return b }
	config := func(dsn string, wait time.Duration) convergecli.Config {
		return convergecli.Config{DatabaseURL: dsn, Role: convergecli.RoleControl, ListenAddr: "127.0.0.1:0",
			HealthAddr: "127.0.0.1:0", ReaperRetryWindow: 30 * time.Second, MemberID: "boot", Dev: true,
			SecretKey: key(), CallbackKey: key(), DatabaseWait: wait}
	}
	at := func(addr string) string { // the test database's DSN, at addr
		u, err := url.Parse(e.db.DSN)
		must(t, err)
		u.Host = addr
		return u.String()
	}

	t.Run("database arrives late", func(t *testing.T) {
		u, err := url.Parse(e.db.DSN)
		must(t, err)
		addr := testnet.FreeAddr(t)
		// Nothing listens at addr for the first second; then a forwarder
		// to the real server does.
		fwd := startForwarder(t, addr, u.Host, time.Second)
		begin := time.Now()
		srv, err := convergecli.Start(t.Context(), config(at(addr), 30*time.Second), e.log)
		must(t, err)
		t.Cleanup(func() { must(t, srv.Stop()); fwd.close() })
		if took := time.Since(begin); took < time.Second {
			t.Fatalf("started in %s, before the database was reachable", took)
		}
	})

	t.Run("database never arrives", func(t *testing.T) {
		begin := time.Now()
		_, err := convergecli.Start(t.Context(), config(at(testnet.FreeAddr(t)), time.Second), e.log)
		if err == nil || !strings.Contains(err.Error(), "DATABASE_WAIT") {
			t.Fatalf("Start = %v, want an error naming DATABASE_WAIT", err)
		}
		if took := time.Since(begin); took > 10*time.Second {
			t.Errorf("gave up after %s with a 1s DATABASE_WAIT", took)
		}
	})

	t.Run("refusal is not retried", func(t *testing.T) {
		u, err := url.Parse(e.db.DSN)
		must(t, err)
		u.Path = "/no_such_database"
		begin := time.Now()
		_, err = convergecli.Start(t.Context(), config(u.String(), 30*time.Second), e.log)
		if err == nil || !strings.Contains(err.Error(), "no_such_database") {
			t.Fatalf("Start = %v, want the server's refusal", err)
		}
		if took := time.Since(begin); took > 10*time.Second {
			t.Errorf("a missing database took %s to refuse: it was retried", took)
		}
	})
}

// forwarder relays TCP connections from one address to another.
type forwarder struct {
	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
	done  sync.WaitGroup
}

// startForwarder listens at from after delay and relays each connection to
// to, until close.
func startForwarder(t *testing.T, from, to string, delay time.Duration) *forwarder {
	f := &forwarder{}
	f.done.Go(func() {
		time.Sleep(delay)
		ln, err := net.Listen("tcp", from)
		if err != nil {
			t.Errorf("forwarder: %v", err)
			return
		}
		f.mu.Lock()
		f.ln = ln
		f.mu.Unlock()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, in, out)
			f.mu.Unlock()
			f.done.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			f.done.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
	return f
}

func (f *forwarder) close() {
	f.mu.Lock()
	if f.ln != nil {
		f.ln.Close()
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.done.Wait()
}
