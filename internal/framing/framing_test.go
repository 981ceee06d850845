package framing_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/convergeplane/converge/internal/framing"
)

// TestCheck: a raw header section passes only with CRLF line ends, no
// folded line, no whitespace before a colon and no Transfer-Encoding; a
// refusal names the header it is about.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw, location string // location "": passes
	}{
		{"none", "", ""},
		{"plain", "Host: a\r\nContent-Length: 2\r\nX-Colon: a:b\r\n\r\n", ""},
		{"Transfer-Encoding", "Host: a\r\nTransfer-Encoding: chunked\r\n\r\n", "header.Transfer-Encoding"},
		{"Transfer-Encoding in lower case", "transfer-encoding: chunked\r\nContent-Length: 2\r\n\r\n", "header.Transfer-Encoding"},
		{"bare LF", "Host: a\nContent-Length: 2\r\n\r\n", "header"},
		{"bare LF ending the section", "Host: a\r\n\n", "header"},
		{"folded", "X-A: b\r\n Transfer-Encoding: chunked\r\n\r\n", "header"},
		{"folded by a tab", "X-A: b\r\n\tc\r\n\r\n", "header"},
		{"space before the colon", "Transfer-Encoding : chunked\r\n\r\n", "header"},
		{"tab before the colon", "Content-Length\t: 2\r\n\r\n", "header"},
		{"no colon", "Host a\r\n\r\n", "header"},
	} {
		p := framing.Check([]byte(tc.raw))
		switch {
		case tc.location == "" && p != nil:
			t.Errorf("%s: refused (%s)", tc.name, p.Detail)
		case tc.location != "" && (p == nil || p.Status != http.StatusBadRequest || len(p.Errors) != 1 || p.Errors[0].Location != tc.location):
			t.Errorf("%s: %+v, want a 400 at %s", tc.name, p, tc.location)
		}
	}
	both := framing.Check([]byte("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"))
	if both == nil || both.Detail == framing.TransferEncoding(false).Detail {
		t.Errorf("Content-Length with Transfer-Encoding: %+v, want the detail naming both", both)
	}
}

// TestGuard: a request net/http parsed with Transfer-Encoding is refused
// and its connection closed; an HTTP/1.0 one is served with its connection
// closed; any other is served as is.
func TestGuard(t *testing.T) {
	t.Parallel()
	served := 0
	h := framing.Guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { served++ }))
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	chunked := httptest.NewRequest(http.MethodPost, "/v1/tasks/outcomes", nil)
	chunked.TransferEncoding = []string{"chunked"}
	if rec := serve(chunked); rec.Code != http.StatusBadRequest || rec.Header().Get("Connection") != "close" || served != 0 {
		t.Errorf("chunked: %d, Connection %q, served %d; want 400, close, not served", rec.Code, rec.Header().Get("Connection"), served)
	}
	old := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	old.Proto, old.ProtoMajor, old.ProtoMinor = "HTTP/1.0", 1, 0
	if rec := serve(old); rec.Header().Get("Connection") != "close" || served != 1 {
		t.Errorf("HTTP/1.0: Connection %q, served %d; want close, served", rec.Header().Get("Connection"), served)
	}
	if rec := serve(httptest.NewRequest(http.MethodGet, "/metrics", nil)); rec.Header().Get("Connection") != "" || served != 2 {
		t.Errorf("HTTP/1.1: Connection %q, served %d; want it served as is", rec.Header().Get("Connection"), served)
	}
}
