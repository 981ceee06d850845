// Package proxy is the chaos suite's TCP proxy: it sits on one process's path
// to another (a converge process to PostgreSQL, the dispatchers to the
// provider, the provider to a dispatcher's callbacks) so the suite can cut
// that path for a while.
package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy listens on a loopback port and copies every connection both ways to
// its upstream address.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	cutUntil time.Time
	closed   bool
	wg       sync.WaitGroup
}

// Start listens on 127.0.0.1 (a free port) and forwards to upstream.
func Start(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the upstream.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every live connection and refuses new ones (accepted, then
// closed at once) for d.
func (p *Proxy) Cut(d time.Duration) {
	p.mu.Lock()
	p.cutUntil = time.Now().Add(d)
	live := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range live {
		_ = c.Close() // a cut is meant to break the connection
	}
}

// Cutting reports whether a cut is in force now.
func (p *Proxy) Cutting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().Before(p.cutUntil)
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	live := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	_ = p.ln.Close() // unblocks accept
	for c := range live {
		_ = c.Close()
	}
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		refuse := p.closed || time.Now().Before(p.cutUntil)
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		go p.serve(c)
	}
}

// track registers c as live unless a cut began meanwhile.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || time.Now().Before(p.cutUntil) {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, up) {
		_ = c.Close()
		_ = up.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends when either side closes
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	p.untrack(c, up)
}
