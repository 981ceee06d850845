package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/api/apitest"
	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestMain gives each test its own database (pgtest) and fails the package
// if a test leaks a goroutine.
func TestMain(m *testing.M) { pgtest.Main(m) }

// testServerVersion is the version the test API reports.
const testServerVersion = "v0.1.0-test"

// Tokens of the authenticated API (see startAPI).
const (
	testAdminToken = "admin-token"
	testReadToken  = "read-token"
)

// realAPI is the real REST API (control/api over its own pgtest database,
// wired the way the converge server wires it, endpoints included), served by
// Fiber on a loopback listener. conctl talks to it through a transparent
// recording proxy, so tests can check both what conctl sent and what the
// real server answered.
type realAPI struct {
	url string         // the proxy, what conctl is pointed at
	st  *store.Store   // the API's store (nil without an API)
	eng *engine.Engine // the engine over the API's database, for a test to play the provider (nil without an API)

	// lose is how many of the next POSTs lose their answer: the server
	// runs the request, then the connection is cut before the answer
	// reaches conctl (what a retry with an idempotency key is for).
	lose atomic.Int32
	// unavailable is how many of the next requests are answered 503
	// without reaching the server, as a load balancer does while no pod
	// is ready.
	unavailable atomic.Int32

	mu       sync.Mutex
	requests []recordedRequest
}

type recordedRequest struct {
	Method string
	Path   string // decoded, without /api/v1
	Query  url.Values
	Header http.Header
	Body   []byte

	// The real server's answer.
	Status     int
	Answer     []byte
	NextCursor string // X-Next-Cursor
	Replayed   bool   // Idempotent-Replayed: the answer of an earlier request with its key
	Lost       bool   // cut before the answer reached conctl (realAPI.lose)
}

// apiOptions configures startAPI.
type apiOptions struct {
	auth bool // require testAdminToken (or testReadToken for reads)
	// batchMaxItems is the server's item limit of POST /resources:batch; 0
	// takes the default.
	batchMaxItems int
	// listPageBytes is the server's byte budget of a list page; 0 takes
	// the default.
	listPageBytes int
	// events serves the change stream (GET /events/stream), woken by a
	// LISTEN on the API's database, as the converge server does.
	events bool
}

func startAPI(t *testing.T, opts apiOptions) *realAPI {
	t.Helper()
	db := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	st := store.New(db.Pool, store.Config{})
	kinds := store.NewKindCache(st, store.KindCacheConfig{}, log)
	if err := kinds.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kinds.Stop)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := store.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{
		Version: testServerVersion,
		// As the converge server outside dev mode: https targets, public hosts.
		Endpoints: &api.EndpointsConfig{Box: box,
			ValidateURL: func(u string) error { return egress.ValidateTargetURL(u, egress.Policy{}) }},
	}
	cfg.BatchMaxItems, cfg.ListPageBytes = opts.batchMaxItems, opts.listPageBytes
	if opts.auth {
		cfg.AdminTokens, cfg.ReadTokens = []string{testAdminToken}, []string{testReadToken}
	}
	var hub *api.EventHub
	if opts.events {
		lis := st.NewListener(log)
		hub = api.NewEventHub(api.EventHubConfig{}, lis.Subscribe)
		cfg.Events = hub
		defer func() {
			for _, svc := range []interface {
				Start(context.Context) error
				Stop()
			}{hub, lis} {
				if err := svc.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(svc.Stop) // before the server's shutdown, which waits for open streams
			}
		}()
	}
	srv, err := api.New(cfg, st, kinds, log)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(apitest.Serve(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections) // before the API shuts down (cleanups run last first)
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: tr,
	}
	a := recordingFront(t, proxy)
	a.st, a.eng = st, engine.New(db.Pool, engine.Config{SpecCheck: kinds.CheckComposedSpec})
	return a
}

// startNoAPI stands in for the API in tests where conctl must not call it
// at all (usage errors, local failures): whatever arrives is recorded and
// fails the test. It saves those tests a database.
func startNoAPI(t *testing.T) *realAPI {
	t.Helper()
	return recordingFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("conctl called the API: %s %s", r.Method, r.URL.RequestURI())
		http.Error(w, "this test has no API", http.StatusInternalServerError)
	}))
}

// recordingFront serves next on a loopback httptest server, recording and
// logging each request and its answer.
func recordingFront(t *testing.T, next http.Handler) *realAPI {
	t.Helper()
	a := &realAPI{}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == APIPrefix+"/events/stream" {
			// A stream is never done: passed through unrecorded.
			t.Logf("API: %s %s (streamed)", r.Method, r.URL.RequestURI())
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		req := recordedRequest{
			Method: r.Method, Path: strings.TrimPrefix(r.URL.Path, APIPrefix),
			Query: r.URL.Query(), Header: r.Header.Clone(), Body: body,
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		if a.unavailable.Add(-1) >= 0 {
			rec.Header().Set("Content-Type", "application/problem+json")
			rec.WriteHeader(http.StatusServiceUnavailable)
			_, _ = rec.WriteString(`{"type":"urn:converge:problem:unavailable","title":"Service Unavailable","status":503,"detail":"no pod is ready","errors":[]}`)
		} else {
			next.ServeHTTP(rec, r)
		}
		req.Status, req.Answer, req.NextCursor = rec.Code, rec.Body.Bytes(), rec.Header().Get("X-Next-Cursor")
		req.Replayed = rec.Header().Get("Idempotent-Replayed") == "true"
		req.Lost = r.Method == http.MethodPost && a.lose.Add(-1) >= 0
		a.mu.Lock()
		a.requests = append(a.requests, req)
		a.mu.Unlock()
		if req.Lost {
			t.Logf("API: %s %s -> %d, answer lost", r.Method, r.URL.RequestURI(), rec.Code)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("cannot cut the connection: %v", err)
				return
			}
			conn.Close()
			return
		}
		t.Logf("API: %s %s %s\n  -> %d %s %s", r.Method, r.URL.RequestURI(), body,
			rec.Code, rec.Header().Get("X-Apply-Result"), bytes.TrimSpace(rec.Body.Bytes()))
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(front.Close)
	a.url = front.URL
	return a
}

func (a *realAPI) recorded() []recordedRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.requests)
}

// forget drops the requests recorded so far (after seeding).
func (a *realAPI) forget() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests = nil
}
