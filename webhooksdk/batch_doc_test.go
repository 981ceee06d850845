package webhooksdk_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// roundTripFunc answers every request itself (here: the example's callback host).
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestProtocolDocBatchExample keeps docs/protocol.md §16.6 honest: the doc quotes the
// testdata files exactly, its signature verifies, and a Handler fed the example request
// answers with the example response — one outcome, one accepted.
func TestProtocolDocBatchExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(string(b), "\n")
	}
	body, wantResp := read("batch_request.json"), read("batch_response.json")
	if got := docBlock(t, doc, "batch-request"); got != body {
		t.Fatalf("the doc's batch request is not testdata/batch_request.json:\n%s", got)
	}
	_, docResp := splitHTTP(t, docBlock(t, doc, "batch-response"))
	if docResp != wantResp {
		t.Fatalf("the doc's batch response is not testdata/batch_response.json:\n%s", docResp)
	}
	headers, _ := splitHTTP(t, docBlock(t, doc, "batch-headers"))
	if got := headers.Get("Content-Length"); got != "1088" || len(body) != 1088 {
		t.Errorf("Content-Length %s, body is %d bytes", got, len(body))
	}
	batch := decodeStrict[webhooksdk.Batch](t, []byte(body))

	g := newGate(t)
	p := newFake(kvVPC, func(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		if req.Resource.Name == "team-red" {
			<-g.open // slower than the sync budget: accepted
		}
		return webhooksdk.Outcome{Status: []byte(`{"vpc_id":"vpc-0a1b2c3d"}`)}, nil
	})
	callbacks := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
	})}
	ep, err := webhooksdk.Handler([]webhooksdk.Provider{p},
		webhooksdk.WithSecrets(vectorSecret),
		webhooksdk.WithSyncBudget(200*time.Millisecond),
		webhooksdk.WithHTTPClient(callbacks),
		webhooksdk.WithClock(func() time.Time { return time.Unix(1767225600, 0) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.Open()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), waitTimeout)
		defer cancel()
		_ = ep.Shutdown(ctx)
	})
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/converge", bytes.NewReader([]byte(body)))
	for k, v := range headers {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	ep.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != wantResp {
		t.Fatalf("Handler answered %d %s\nwant 200 %s", rec.Code, rec.Body, wantResp)
	}
	if len(batch.Tasks) != 2 || p.calls.Load() != 2 {
		t.Fatalf("%d tasks, %d Work calls; want 2 and 2", len(batch.Tasks), p.calls.Load())
	}
}
