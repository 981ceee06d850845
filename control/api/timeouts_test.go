package api_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/api"
)

// rawConn dials the API and returns the connection, closed when the test
// ends.
func rawConn(t *testing.T, base string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitClosed reads c until the server closes it, failing the test if that
// takes more than within. It returns what was read before the close.
func waitClosed(t *testing.T, c net.Conn, within time.Duration, what string) string {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("%s: the server had not closed the connection after %s (read %q)", what, within, b)
	case err != nil && !errors.Is(err, syscall.ECONNRESET):
		t.Fatalf("%s: read %v", what, err)
	}
	return string(b)
}

// TestHeaderTimeout: a connection that sends nothing is closed once
// HeaderTimeout has passed; one that never finishes its headers is answered
// 408 (a timeout problem) and closed; a kept-alive connection idle past
// IdleTimeout is closed.
func TestHeaderTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{HeaderTimeout: 300 * time.Millisecond, IdleTimeout: 600 * time.Millisecond})

	silent := rawConn(t, b.base)
	partial := rawConn(t, b.base)
	if _, err := io.WriteString(partial, "GET /livez HTTP/1.1\r\nHost: converge\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	if got := waitClosed(t, silent, 10*time.Second, "a connection that sends nothing"); got != "" {
		t.Errorf("a connection that sent nothing was answered %q before it was closed", got)
	}
	if got := waitClosed(t, partial, 10*time.Second, "a connection whose headers never end"); !strings.HasPrefix(got, "HTTP/1.1 408 ") ||
		!strings.Contains(got, "urn:converge:problem:timeout") {
		t.Errorf("a connection whose headers never end was answered %q, want a 408 timeout problem", got)
	}

	idle := rawConn(t, b.base)
	if _, err := io.WriteString(idle, "GET /livez HTTP/1.1\r\nHost: converge\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /livez = %d", resp.StatusCode)
	}
	waitClosed(t, idle, 10*time.Second, "a kept-alive connection left idle")
}

// TestBodyReadTimeout: a request whose headers arrived in time has
// ReadTimeout, not HeaderTimeout, to send its body. Its body is sent only
// once a connection opened with it, whose headers never end, has been
// closed by the header timeout: the body's connection is past that timeout
// too, and is still served.
func TestBodyReadTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{HeaderTimeout: 300 * time.Millisecond, ReadTimeout: 30 * time.Second})
	body := `{"kind":"widget","kind_version":1}`
	slow := rawConn(t, b.base)
	stalled := rawConn(t, b.base)
	if _, err := io.WriteString(slow, "PUT /api/v1/kinds/widget/manifest HTTP/1.1\r\nHost: converge\r\n"+
		"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body[:5]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stalled, "GET /livez HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, stalled, 10*time.Second, "the stalled connection")
	if _, err := io.WriteString(slow, body[5:]); err != nil {
		t.Fatal(err)
	}
	if err := slow.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatalf("a body sent after the header timeout: %v, want it read and answered", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT manifest with a slow body = %d, want 201", resp.StatusCode)
	}
}

// TestEventStreamOutlivesWriteTimeout: an open change stream whose client
// reads is not cut by the write timeout: its keep-alives keep arriving for
// several times WriteTimeout.
func TestEventStreamOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	const writeTimeout = 300 * time.Millisecond
	b := setupEvents(t, api.Config{WriteTimeout: writeTimeout}, api.EventHubConfig{KeepAlive: 50 * time.Millisecond})
	s := b.open(t, "", "")
	begin := time.Now()
	keepAlives := 0
	for time.Since(begin) < 4*writeTimeout {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended after %s (%d keep-alives) with a %s write timeout", time.Since(begin), keepAlives, writeTimeout)
			}
			if ev.name == "comment" {
				keepAlives++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no event for 10s")
		}
	}
	if keepAlives == 0 {
		t.Fatal("no keep-alive arrived: the check saw nothing")
	}
}
