// Package acceptor guards a server's listener. Its Listener caps the
// connections open at once, in all and per client address, and outlives the
// accept errors that pass: the process or the system out of descriptors
// (EMFILE, ENFILE), a connection reset before it was accepted
// (ECONNABORTED), buffers or memory short (ENOBUFS, ENOMEM). fasthttp ends
// Serve on any of them and net/http retries only some, so every listener of
// a converge process accepts through one.
//
// At the total cap Accept waits for an open connection to close before it
// takes the next. The connections beyond wait in the kernel's listen
// backlog, holding no descriptor of the process, and are served in turn as
// the server's timeouts close the idle and the stalled; once the backlog is
// full the kernel drops new handshakes and clients retry them. Closing them
// instead would cost a descriptor and a syscall each and serve no one
// sooner.
//
// A connection beyond its address's cap is accepted and closed at once, with
// nothing written: the address is only known once the connection is
// accepted, and the listener sits below TLS and HTTP, so there is no
// protocol to answer in. Other addresses are not held up by it.
package acceptor

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Config configures a Listener. The zero value caps nothing and logs
// nothing.
type Config struct {
	// Name names the listener in log lines ("api", "health").
	Name string
	// MaxConns caps the connections open at once; Accept waits at the cap.
	// Zero: no cap.
	MaxConns int
	// MaxConnsPerAddr caps the connections open at once from one client IP
	// address; one more is closed as soon as it is accepted. Zero: no cap.
	MaxConnsPerAddr int
	// Logger receives the accept errors retried and the connections refused
	// (at most one line per 10 s of each). Nil discards them.
	Logger *slog.Logger
}

// Accept's retry of a passing error: the first wait, doubled on each
// failure in a row up to the last (net/http's own figures).
const (
	retryFirst = 5 * time.Millisecond
	retryMax   = time.Second
)

// logEvery is the least time between two log lines of one kind (an accept
// error retried, a connection over its address's cap): a flood must not
// flood the log too.
const logEvery = 10 * time.Second

// Listener is a net.Listener with connection caps and accept retries.
type Listener struct {
	net.Listener
	cfg   Config
	log   *slog.Logger
	slots chan struct{} // one token per open connection; nil without MaxConns
	done  chan struct{} // closed by Close
	once  sync.Once     // closes done

	mu      sync.Mutex
	perAddr map[netip.Addr]int

	retried, refused logThrottle
}

// New wraps ln.
func New(ln net.Listener, cfg Config) *Listener {
	l := &Listener{Listener: ln, cfg: cfg, log: cfg.Logger, done: make(chan struct{}), perAddr: map[netip.Addr]int{}}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConns > 0 {
		l.slots = make(chan struct{}, cfg.MaxConns)
	}
	return l
}

// Accept returns the next connection within the caps. It retries the
// passing errors (see the package doc) with backoff, from 5 ms
// doubling to 1 s, and returns any other error of the wrapped
// listener, or net.ErrClosed once Close was called.
func (l *Listener) Accept() (net.Conn, error) {
	delay := time.Duration(0)
	for {
		if err := l.takeSlot(); err != nil {
			return nil, err
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.freeSlot()
			if !passing(err) {
				return nil, err
			}
			delay = min(max(2*delay, retryFirst), retryMax)
			if n, ok := l.retried.tick(); ok {
				l.log.Warn("accept failed; retrying", "listener", l.cfg.Name, "err", err, "in", delay, "failures", n)
			}
			if err := l.wait(delay); err != nil {
				return nil, err
			}
			continue
		}
		delay = 0
		addr, ok := l.admit(c)
		if !ok {
			_ = c.Close() // refused: nothing was read or written
			l.freeSlot()
			if n, ok := l.refused.tick(); ok {
				l.log.Warn("connection refused: its address is at its cap of open connections", "listener", l.cfg.Name,
					"addr", addr, "max_conns_per_addr", l.cfg.MaxConnsPerAddr, "refused", n)
			}
			continue
		}
		return &conn{Conn: c, release: func() { l.release(addr) }}, nil
	}
}

// Close closes the wrapped listener and ends an Accept waiting at the cap
// or between retries.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// takeSlot waits for room under MaxConns.
func (l *Listener) takeSlot() error {
	if l.slots == nil {
		return nil
	}
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-l.done:
		return net.ErrClosed
	}
}

func (l *Listener) freeSlot() {
	if l.slots != nil {
		<-l.slots
	}
}

// wait sleeps d, or returns net.ErrClosed as soon as the listener closes.
func (l *Listener) wait(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-l.done:
		return net.ErrClosed
	}
}

// admit counts c against its address's cap; false when the address is at
// its cap (c is then not counted). An address it cannot read (not TCP) is
// not capped.
func (l *Listener) admit(c net.Conn) (netip.Addr, bool) {
	tcp, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok || l.cfg.MaxConnsPerAddr <= 0 {
		return netip.Addr{}, true
	}
	addr := tcp.AddrPort().Addr().Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perAddr[addr] >= l.cfg.MaxConnsPerAddr {
		return addr, false
	}
	l.perAddr[addr]++
	return addr, true
}

// release gives back a closed connection's slot and its address's count.
func (l *Listener) release(addr netip.Addr) {
	if addr.IsValid() {
		l.mu.Lock()
		if l.perAddr[addr]--; l.perAddr[addr] <= 0 {
			delete(l.perAddr, addr)
		}
		l.mu.Unlock()
	}
	l.freeSlot()
}

// passing reports whether an accept error may clear by itself.
func passing(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// conn gives its slot back on its first Close.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// logThrottle lets one log line through per logEvery and counts the events
// in between.
type logThrottle struct {
	mu   sync.Mutex
	last time.Time
	n    int
}

// tick counts one event; ok is true when it should be logged, n then being
// the events since the last line logged (this one included).
func (t *logThrottle) tick() (n int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	if now := time.Now(); t.last.IsZero() || now.Sub(t.last) >= logEvery {
		n, t.last, t.n = t.n, now, 0
		return n, true
	}
	return 0, false
}
