package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestConnectionFlood: connections that never finish their headers, twice
// as many as the process may open files, leave a ROLE=all process up:
// /readyz on HEALTH_ADDR keeps answering, and a well-behaved client is
// served again within one idle timeout. The process starts under a soft
// open-file limit below its hard one and runs at the hard one (less one:
// Go's runtime raises it so, and the process logs it).
//
// With the default caps, sized from that limit, the flood's address is
// held to its cap (the rest closed at once) and another address is served
// during the flood. With caps above the limit the flood runs the process out
// of descriptors: accept4's EMFILE is retried until the header timeout has
// closed enough of the flood, where it used to end the process.
func TestConnectionFlood(t *testing.T) {
	t.Parallel()
	const (
		softLimit, hardLimit = 128, 256
		idleTimeout          = 10 * time.Second
	)
	for _, tc := range []struct {
		name      string
		env       []string
		overLimit bool // the caps let the flood exhaust the descriptors
	}{
		{name: "default caps"},
		{name: "caps above the open-file limit", env: []string{"LISTEN_MAX_CONNS=100000", "LISTEN_MAX_CONNS_PER_ADDR=100000"}, overLimit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			p := startProcess(t, db.DSN, processOpts{nofile: [2]uint64{softLimit, hardLimit},
				env: append([]string{"HTTP_HEADER_TIMEOUT=1s", "HTTP_IDLE_TIMEOUT=" + idleTimeout.String()}, tc.env...)})

			soft, hard := p.fileLimit()
			if hard != hardLimit || soft < hard-1 {
				t.Errorf("open-file limit %d (hard %d), want the soft limit raised to the hard %d at start", soft, hard, hardLimit)
			}
			if !strings.Contains(p.logs.String(), fmt.Sprintf("limit=%d hard_limit=%d", soft, hard)) {
				t.Errorf("the process did not log its open-file limit %d/%d", soft, hard)
			}
			open := p.openFiles()
			flood := halfOpen(t, p.addr, int(2*hard))
			t.Logf("%d descriptors open before the flood; %d half-open connections dialled", open, flood)
			if flood <= int(hard) {
				t.Fatalf("only %d of %d connections connected: no flood past the open-file limit", flood, 2*hard)
			}
			begin := time.Now()

			for range 3 {
				resp, err := p.client(idleTimeout, "").Get("http://" + p.health + "/readyz")
				if err != nil {
					t.Fatalf("/readyz on HEALTH_ADDR during the flood: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("/readyz on HEALTH_ADDR during the flood = %d, want 200", resp.StatusCode)
				}
			}
			if !tc.overLimit {
				// Another address is not held up by the flood's.
				resp, err := p.client(idleTimeout, "127.0.0.2").Get("http://" + p.addr + "/livez")
				if err != nil {
					t.Fatalf("GET /livez from another address during the flood: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET /livez from another address during the flood = %d", resp.StatusCode)
				}
			}
			// The flood's own address, retrying as a client does when its
			// connection is closed.
			var last error
			retry := time.NewTicker(50 * time.Millisecond)
			defer retry.Stop()
			for ; ; <-retry.C {
				resp, err := p.client(idleTimeout, "127.0.0.1").Get("http://" + p.addr + "/livez")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
				last = err
				p.requireUp()
				if time.Since(begin) > idleTimeout {
					t.Fatalf("a client from the flood's address was not served within one idle timeout (%s): %v", idleTimeout, last)
				}
			}
			t.Logf("served again %s after the flood (last refusal: %v)", time.Since(begin).Round(time.Millisecond), last)
			p.requireUp()

			logs := p.logs.String()
			if tc.overLimit && !strings.Contains(logs, "accept failed; retrying") {
				t.Error("no accept error was logged: the flood did not run the process out of descriptors")
			}
			if !tc.overLimit && !strings.Contains(logs, "its address is at its cap") {
				t.Error("no connection over its address's cap was logged")
			}
		})
	}
}

// halfOpen dials n connections to addr from 127.0.0.1, each sending the
// start of a request and never its end, and returns how many connected. A
// dial that times out means the kernel's listen backlog is full (a small
// net.core.somaxconn): the flood stops there. They are closed when the test
// ends.
func halfOpen(t *testing.T, addr string, n int) int {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, Timeout: 2 * time.Second}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			break
		}
		conns = append(conns, c)
		// The server may have closed it already (over its address's cap).
		_, _ = io.WriteString(c, "GET /api/v1/kinds HTTP/1.1\r\nHost: converge\r\nX-Never-Ends: ")
	}
	return len(conns)
}

// fileLimit reads the process's RLIMIT_NOFILE from /proc.
func (p *process) fileLimit() (soft, hard uint64) {
	p.t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/limits", p.cmd.Process.Pid))
	must(p.t, err)
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if rest, ok := strings.CutPrefix(sc.Text(), "Max open files"); ok {
			fields := strings.Fields(rest)
			soft, err := strconv.ParseUint(fields[0], 10, 64)
			must(p.t, err)
			hard, err := strconv.ParseUint(fields[1], 10, 64)
			must(p.t, err)
			return soft, hard
		}
	}
	p.t.Fatal("no Max open files line in /proc/<pid>/limits")
	return 0, 0
}

// openFiles counts the process's open descriptors.
func (p *process) openFiles() int {
	p.t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	must(p.t, err)
	return len(fds)
}
