package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// TestDocumentedLimitsAreReachable: a label_selector at its documented
// 4,096 bytes, every byte percent-encoded, with a 4 KiB bearer token,
// reaches the API, and one byte more is the API's own 400 naming the
// parameter. A read buffer of fasthttp's default 4 KiB answered both with
// 431 about:blank. Past MaxHeaderBytes the answer is a 431 problem of the
// project's type, echoing nothing of the request.
func TestDocumentedLimitsAreReachable(t *testing.T) {
	t.Parallel()
	token := strings.Repeat("t", 4096)
	b := setup(t, api.Config{ReadTokens: []string{token}})
	auth := "Authorization: Bearer " + token

	// selector builds a valid selector of n bytes: four pairs (a selector
	// holds at most 64 labels), the values sharing the length.
	selector := func(n int) string {
		pairs := make([]string, 4)
		for i := range pairs {
			pairs[i] = fmt.Sprintf("k%d=", i)
		}
		rest := n - len(strings.Join(pairs, ","))
		for i := range pairs {
			pairs[i] += strings.Repeat("v", rest/4+min(1, max(0, rest%4-i)))
		}
		return strings.Join(pairs, ",")
	}
	encoded := func(s string) string {
		var e strings.Builder
		for i := range len(s) {
			fmt.Fprintf(&e, "%%%02X", s[i])
		}
		return e.String()
	}

	at := selector(api.MaxSelectorBytes)
	if len(at) != api.MaxSelectorBytes {
		t.Fatalf("the selector is %d bytes, want %d", len(at), api.MaxSelectorBytes)
	}
	b.do(http.MethodGet, "/api/v1/resources?label_selector="+encoded(at), nil, auth).want(t, http.StatusOK)

	p := b.do(http.MethodGet, "/api/v1/resources?label_selector="+encoded(selector(api.MaxSelectorBytes+1)), nil, auth).
		wantProblem(t, http.StatusBadRequest, "query.label_selector")
	if p.Type != "urn:converge:problem:malformed-request" {
		t.Errorf("type %q, want malformed-request", p.Type)
	}

	// The server answers 431 once it has read MaxHeaderBytes and closes the
	// connection with the rest of the request unread, so the kernel may
	// reset it while the client still sends, and the answer is lost to
	// the client (as with any server that does not linger before it
	// closes): a transport error is tried again, a few times.
	pad := strings.Repeat("p", api.MaxHeaderBytes)
	var r response
	for attempt := 1; ; attempt++ {
		var err error
		if r, err = b.try(http.MethodGet, "/api/v1/resources", nil, auth, "X-Pad: "+pad); err == nil {
			break
		}
		if attempt == 5 {
			t.Fatalf("five attempts at an oversized request got no answer: %v", err)
		}
	}
	p = r.wantProblem(t, http.StatusRequestHeaderFieldsTooLarge, "header")
	if p.Type != "urn:converge:problem:headers-too-large" || !strings.Contains(p.Detail, fmt.Sprint(api.MaxHeaderBytes)) {
		t.Errorf("problem %+v, want headers-too-large naming the %d-byte limit", p, api.MaxHeaderBytes)
	}
	if body := string(r.body); strings.Contains(body, "ppp") || strings.Contains(body, "ttt") {
		t.Errorf("the answer echoes the request's headers: %s", body)
	}
}
