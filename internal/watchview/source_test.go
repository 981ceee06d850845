package watchview

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestSource reads a graph and the laggards' tasks over HTTP as the API
// serves them.
func TestSource(t *testing.T) {
	t.Parallel()
	next := t0.Add(12 * time.Second)
	bodies := map[string]string{
		"/api/v1/resources/bom/a/graph": `{"nodes":[{"kind":"bom","name":"a","phase":"Reconciling"},{"kind":"vpc","name":"v 1","phase":"Failed"}],"edges":[]}`,
		"/api/v1/resources/vpc/v%201":   `{"kind":"vpc","name":"v 1","task":{"state":"pending","attempts":3,"not_before":"` + next.Format(time.RFC3339Nano) + `"}}`,
		"/api/v1/resources/vpc/running": `{"task":{"state":"claimed","attempts":1,"not_before":"2026-01-02T03:04:05Z"}}`,
		"/api/v1/resources/vpc/parked":  `{"task":{"state":"pending","attempts":0,"not_before":"2026-01-02T03:04:05Z"},"parked":"no ready endpoint serves vpc/1"}`,
		"/api/v1/resources/vpc/idle":    `{"kind":"vpc","name":"idle"}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := bodies[r.URL.EscapedPath()]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(body)) //nolint:errcheck // the test reads what it got
	}))
	t.Cleanup(srv.Close)
	get := func(ctx context.Context, path string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1"+path, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, errors.New(resp.Status)
		}
		return io.ReadAll(resp.Body)
	}
	src := Source{Get: get, Kind: "bom", Name: "a", Now: func() time.Time { return t0 }}
	s, err := src.Snapshot(t.Context())
	if err != nil || s.Root.Phase != "Reconciling" || len(s.Children) != 1 || !s.At.Equal(t0) {
		t.Fatalf("snapshot = %+v, %v", s, err)
	}
	for ref, want := range map[string]Attempt{
		"vpc/v 1":     {Failed: 3, Next: next},
		"vpc/running": {Failed: 1, Running: true},
		"vpc/parked":  {Next: t0, Parked: "no ready endpoint serves vpc/1"},
		"vpc/idle":    {},
	} {
		got, err := src.Attempt(t.Context(), ref)
		if err != nil || got.Failed != want.Failed || !got.Next.Equal(want.Next) || got.Running != want.Running || got.Parked != want.Parked {
			t.Errorf("Attempt(%s) = %+v, %v; want %+v", ref, got, err, want)
		}
	}
	if _, err := src.Attempt(t.Context(), "vpc/gone"); err == nil {
		t.Error("the attempt of a resource the server does not know read without an error")
	}
}
