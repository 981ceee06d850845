package integration

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
)

// TestRequestSmuggling writes the classic smuggling forms byte for byte to
// a real server's listeners, the API's (Fiber on fasthttp, ROLE=all) and a
// dispatch-only pod's (net/http: the callback routes and /metrics), and
// reads what comes back. Each request carries a second one after it, which
// a proxy framing the body by Content-Length would take for body bytes: a
// refused form must get one answer and a closed connection, so that second
// request is never read; a form both parsers frame alike gets both answers.
// No answer may echo the request's headers: the duplicate Content-Length
// answer repeated them, bearer token included. docs/operations.md
// ("Request smuggling") has the same table.
func TestRequestSmuggling(t *testing.T) {
	t.Parallel()
	const token = "read-token-that-must-never-be-echoed"
	tune := func(c *convergecli.Config) {
		c.ReadTokens = []string{token}
		c.AdminTokens = []string{"admin-" + token}
	}
	api, _ := startOps(t, t.Context(), convergecli.RoleAll, tune)
	dispatchPod, _ := startOps(t, t.Context(), convergecli.RoleDispatch, tune)

	// The next request, which a smuggling attempt hides in the body.
	const next = "GET /smuggled HTTP/1.1\r\nHost: converge\r\n\r\n"
	// request is GET path with head (header lines, each ending CRLF), body
	// and next after it; version and line ending of the request line vary.
	type request struct {
		version, eol, head, body string
	}
	raw := func(path string, r request) string {
		return "GET " + path + " " + cmp.Or(r.version, "HTTP/1.1") + cmp.Or(r.eol, "\r\n") + "Host: converge\r\nAuthorization: Bearer " + token +
			"\r\n" + r.head + "\r\n" + r.body + next
	}
	// hidden is a Content-Length covering body and next: what a proxy
	// that frames by Content-Length forwards as one request.
	hidden := func(body string) string { return fmt.Sprintf("Content-Length: %d\r\n", len(body)+len(next)) }

	// want is one listener's answer: its status, whether it is a problem
	// document, and whether the connection stays open (the next request
	// answered) or is closed after the one answer.
	type want struct {
		status  int
		problem bool
		open    bool
	}
	refused := want{http.StatusBadRequest, true, false}
	for _, tc := range []struct {
		name          string
		req           request
		api, dispatch want
	}{
		{"CL.TE: Content-Length then Transfer-Encoding", request{head: hidden("0\r\n\r\n") + "Transfer-Encoding: chunked\r\n", body: "0\r\n\r\n"},
			refused, refused},
		{"TE.CL: Transfer-Encoding then Content-Length", request{head: "Transfer-Encoding: chunked\r\n" + hidden("0\r\n\r\n"), body: "0\r\n\r\n"},
			refused, refused},
		{"Transfer-Encoding: chunked alone", request{head: "Transfer-Encoding: chunked\r\n", body: "0\r\n\r\n"},
			refused, refused},
		{"Content-Length twice, different values", request{head: "Content-Length: 0\r\nContent-Length: 5\r\n"},
			refused, want{http.StatusBadRequest, false, false}},
		{"Content-Length twice, the same value", request{head: "Content-Length: 0\r\nContent-Length: 0\r\n"},
			refused, want{http.StatusOK, false, true}},
		{"whitespace before the colon: Transfer-Encoding :", request{head: hidden("0\r\n\r\n") + "Transfer-Encoding : chunked\r\n", body: "0\r\n\r\n"},
			refused, want{http.StatusBadRequest, false, false}},
		{"Transfer-Encoding: xchunked", request{head: hidden("0\r\n\r\n") + "Transfer-Encoding: xchunked\r\n", body: "0\r\n\r\n"},
			refused, want{http.StatusNotImplemented, false, false}},
		{"Transfer-Encoding: chunked, identity", request{head: hidden("0\r\n\r\n") + "Transfer-Encoding: chunked, identity\r\n", body: "0\r\n\r\n"},
			refused, want{http.StatusNotImplemented, false, false}},
		{"Transfer-Encoding after a tab", request{head: hidden("0\r\n\r\n") + "Transfer-Encoding:\tchunked\r\n", body: "0\r\n\r\n"},
			refused, refused},
		{"transfer-encoding: CHUNKED", request{head: hidden("0\r\n\r\n") + "transfer-encoding: CHUNKED\r\n", body: "0\r\n\r\n"},
			refused, refused},
		{"Transfer-Encoding folded onto another header", request{head: "X-Folded: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", body: "0\r\n\r\n"},
			refused, want{http.StatusOK, false, true}},
		{"a header line ending in a bare LF", request{head: "X-Bare: a\nContent-Length: 0\r\n"},
			refused, want{http.StatusOK, false, true}},
		{"the request line ending in a bare LF", request{eol: "\n", head: "Content-Length: 0\r\n"},
			want{http.StatusOK, false, true}, want{http.StatusOK, false, true}},
		{"HTTP/1.0 with Transfer-Encoding and Content-Length", request{version: "HTTP/1.0",
			head: "Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n" + hidden("0\r\n\r\n"), body: "0\r\n\r\n"},
			refused, want{http.StatusOK, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, l := range []struct {
				name, addr, path string
				want             want
			}{
				{"API listener", api.Addr(), "/livez", tc.api},
				{"dispatch listener", dispatchPod.Addr(), "/metrics", tc.dispatch},
				{"HEALTH_ADDR listener", dispatchPod.HealthAddr(), "/livez", tc.dispatch},
			} {
				answers, closed, all := exchange(t, l.addr, raw(l.path, tc.req))
				first := answers[0]
				switch {
				case first.status != l.want.status:
					t.Errorf("%s: status %d, want %d", l.name, first.status, l.want.status)
				case l.want.problem && first.contentType != "application/problem+json":
					t.Errorf("%s: Content-Type %q, want a problem document", l.name, first.contentType)
				case l.want.open && (len(answers) != 2 || closed):
					t.Errorf("%s: %d answers (closed %v), want the next request answered on the open connection", l.name, len(answers), closed)
				case !l.want.open && (len(answers) != 1 || !closed):
					t.Errorf("%s: %d answers (closed %v), want one answer and the connection closed", l.name, len(answers), closed)
				}
				if strings.Contains(all, token) || strings.Contains(strings.ToLower(all), "authorization") {
					t.Errorf("%s: an answer echoes the request's headers", l.name)
				}
			}
		})
	}
}

// answer is one HTTP answer read off a connection: its status and content
// type.
type answer struct {
	status      int
	contentType string
}

// exchange writes raw to a new connection to addr and reads the answers
// until the server closes the connection (closed) or two answers came; all
// is every byte read. It fails the test if no answer comes, or the server
// leaves the connection open 30 s after one.
func exchange(t *testing.T, addr, raw string) (answers []answer, closed bool, all string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	must(t, err)
	defer c.Close()
	must(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("write the request: %v", err)
	}
	var seen strings.Builder
	br := bufio.NewReader(io.TeeReader(c, &seen))
	defer func() { t.Logf("%s answered:\n%s", addr, seen.String()) }()
	for len(answers) < 2 {
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		switch {
		case err == nil:
			answers = append(answers, answer{resp.StatusCode, resp.Header.Get("Content-Type")})
			continue
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
			closed = true
		case errors.Is(err, os.ErrDeadlineExceeded):
		default:
			t.Fatalf("read an answer: %v", err)
		}
		break
	}
	if len(answers) == 0 {
		t.Fatalf("%s sent no answer (closed %v)", addr, closed)
	}
	if !closed && len(answers) == 1 {
		t.Fatalf("%s sent one answer and left the connection open 30 s", addr)
	}
	return answers, closed, seen.String()
}
