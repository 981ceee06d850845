package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/api/apitest"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is one API server on a private database.
type testBundle struct {
	t     *testing.T
	db    *pgtest.Database
	st    *store.Store
	kinds *store.KindCache
	srv   *api.Server
	base  string // http://127.0.0.1:port

	mu        sync.Mutex
	exchanges []string // request/response dumps, logged if the test fails
}

func setup(t *testing.T, cfg api.Config) *testBundle {
	t.Helper()
	return setupWith(t, cfg, nil)
}

// setupWith is setup with register called on the server before it starts
// serving: fiber's router must not change once it serves.
func setupWith(t *testing.T, cfg api.Config, register func(*api.Server, *store.Store)) *testBundle {
	t.Helper()
	db := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	st := store.New(db.Pool, store.Config{})
	kinds := store.NewKindCache(st, store.KindCacheConfig{}, log)
	if err := kinds.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kinds.Stop)
	srv, err := api.New(cfg, st, kinds, log)
	if err != nil {
		t.Fatal(err)
	}
	if register != nil {
		register(srv, st)
	}
	b := &testBundle{t: t, db: db, st: st, kinds: kinds, srv: srv, base: apitest.Serve(t, srv)}
	t.Cleanup(func() {
		if t.Failed() {
			b.mu.Lock()
			defer b.mu.Unlock()
			for _, e := range b.exchanges {
				t.Log(e)
			}
		}
	})
	return b
}

// endpointsConfig enables the endpoint routes with a fixed test key and an
// egress policy that lets every URL through.
func endpointsConfig(t *testing.T) *api.EndpointsConfig {
	t.Helper()
	box, err := store.NewSecretBox(bytes.Repeat([]byte{7}, store.SecretKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	return &api.EndpointsConfig{Box: box, ValidateURL: func(string) error { return nil }}
}

// response is one answer of the API.
type response struct {
	status int
	header http.Header
	body   []byte
}

// decode unmarshals the body into v.
func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("cannot decode %d answer %q: %v", r.status, r.body, err)
	}
}

// object decodes the body as a JSON object.
func (r response) object(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	r.decode(t, &m)
	return m
}

// do sends one request through the app. body is sent as is when it is a
// string or []byte, else JSON-encoded; hdr is "Name: value" pairs. A
// transport error fails the test.
func (b *testBundle) do(method, path string, body any, hdr ...string) response {
	b.t.Helper()
	r, err := b.try(method, path, body, hdr...)
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

// try is do, returning a transport error instead of failing the test.
func (b *testBundle) try(method, path string, body any, hdr ...string) (response, error) {
	b.t.Helper()
	var raw []byte
	switch v := body.(type) {
	case nil:
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			b.t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.base+path, bytes.NewReader(raw))
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, body: out}
	b.record(method, path, req.Header, raw, r)
	return r, nil
}

func (b *testBundle) record(method, path string, h http.Header, body []byte, r response) {
	var s strings.Builder
	fmt.Fprintf(&s, "→ %s %s\n", method, path)
	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Fprintf(&s, "  %s: %s\n", k, strings.Join(h[k], ", "))
	}
	fmt.Fprintf(&s, "  %s\n← %d\n", clip(body), r.status)
	for _, k := range []string{"Content-Type", "X-Apply-Result", "X-Next-Cursor"} {
		if v := r.header.Get(k); v != "" {
			fmt.Fprintf(&s, "  %s: %s\n", k, v)
		}
	}
	fmt.Fprintf(&s, "  %s", clip(r.body))
	b.mu.Lock()
	b.exchanges = append(b.exchanges, s.String())
	b.mu.Unlock()
}

func clip(b []byte) string {
	if len(b) > 2048 {
		return string(b[:2048]) + fmt.Sprintf("… (%d bytes)", len(b))
	}
	return string(b)
}

// want fails the test unless r has the status.
func (r response) want(t *testing.T, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body: %s", r.status, status, clip(r.body))
	}
	return r
}

// wantApply checks an apply's status and X-Apply-Result.
func (r response) wantApply(t *testing.T, result string) response {
	t.Helper()
	status := http.StatusOK
	if result == "created" {
		status = http.StatusCreated
	}
	r.want(t, status)
	if got := r.header.Get("X-Apply-Result"); got != result {
		t.Fatalf("X-Apply-Result %q, want %q", got, result)
	}
	return r
}

// problem is the decoded problem document.
type problem struct {
	Type   string         `json:"type"`
	Title  string         `json:"title"`
	Status int            `json:"status"`
	Detail string         `json:"detail"`
	Errors []problemError `json:"errors"`
}

type problemError struct {
	Location string `json:"location"`
	Message  string `json:"message"`
	Value    any    `json:"value"`
	Pointer  string `json:"pointer"`
	Keyword  string `json:"keyword"`
}

// at returns the error at location.
func (p problem) at(location string) (problemError, bool) {
	i := slices.IndexFunc(p.Errors, func(e problemError) bool { return e.Location == location })
	if i < 0 {
		return problemError{}, false
	}
	return p.Errors[i], true
}

// wantProblem checks an RFC 9457 answer: status, content type, the required
// members, and — when location is not "" — an error at that location.
func (r response) wantProblem(t *testing.T, status int, location string) problem {
	t.Helper()
	r.want(t, status)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var raw map[string]json.RawMessage
	r.decode(t, &raw)
	for _, member := range []string{"type", "title", "status", "detail", "errors"} {
		if _, ok := raw[member]; !ok {
			t.Fatalf("problem lacks %q: %s", member, r.body)
		}
	}
	var p problem
	r.decode(t, &p)
	if p.Status != status {
		t.Fatalf("problem status %d, want %d", p.Status, status)
	}
	if p.Type == "" || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem has an empty type, title or detail: %s", r.body)
	}
	if strings.Contains(strings.ToLower(string(r.body)), "sqlstate") || strings.Contains(string(r.body), "INSERT ") {
		t.Fatalf("problem leaks SQL: %s", r.body)
	}
	if _, ok := p.at(location); location != "" && !ok {
		t.Fatalf("no error at %q: %s", location, r.body)
	}
	return p
}

// fixture reads a file of examples/versioning/testdata.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "versioning", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// count runs a COUNT(*) over a small test table (the test's own database).
func (b *testBundle) count(query string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// exec runs SQL the API has no route for yet (arranging a test).
func (b *testBundle) exec(query string, args ...any) {
	b.t.Helper()
	if _, err := b.db.Pool.Exec(context.Background(), query, args...); err != nil {
		b.t.Fatal(err)
	}
}

// putManifest publishes a manifest from a fixture file or a literal.
func (b *testBundle) putManifest(kind string, body any) response {
	b.t.Helper()
	return b.do(http.MethodPut, "/api/v1/kinds/"+kind+"/manifest", body)
}

// Small manifests used across tests.
const (
	// widgetKind validates replicas (1..10) and a required image.
	// widgetKind has a finalizer: a deleted widget stays Deleting until its
	// teardown runs, and no provider runs in these tests.
	widgetKind = `{"kind":"widget","kind_version":1,
	  "spec_schema":{"type":"object","properties":{
	     "image":{"type":"string"},"replicas":{"type":"integer","minimum":1,"maximum":10},
	     "note":{"type":"string"},"items":{"type":"array","items":{"type":"object","properties":{"n":{"type":"integer"}}}}},
	   "required":["image"]},
	  "reactions":[{"name":"work","trigger":"specChange","emits":["status"]},
	               {"name":"teardown","trigger":"deleteRequested","emits":["finalizer"],"finalizer":"widget.io/teardown"}]}`
	// noopKind has no reactions: its resources are synced (Ready) on apply.
	noopKind = `{"kind":"noop","kind_version":1,"reactions":[]}`
)
