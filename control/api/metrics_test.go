package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/api"
)

// metricsHandler stands in for the Prometheus handler the server mounts.
var metricsHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "converge_up 1\n")
})

// TestMetricsNeedsReadToken: /metrics was served to anyone while the API
// required tokens, though it names endpoints, kinds and their failure
// counts. With tokens on it needs a read (or admin) token; without, it is
// as open as the API.
func TestMetricsNeedsReadToken(t *testing.T) {
	t.Parallel()

	t.Run("TokensOn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{ReadTokens: []string{"reader"}, AdminTokens: []string{"admin"}, Metrics: metricsHandler})
		if r := b.do(http.MethodGet, "/metrics", nil); strings.Contains(string(r.body), "converge_up") {
			t.Fatalf("metrics served without a token: %d", r.status)
		}
		b.do(http.MethodGet, "/metrics", nil).wantProblem(t, http.StatusUnauthorized, "")
		b.do(http.MethodGet, "/metrics", nil, "Authorization: Bearer guess").wantProblem(t, http.StatusUnauthorized, "")
		for _, tok := range []string{"reader", "admin"} {
			r := b.do(http.MethodGet, "/metrics", nil, "Authorization: Bearer "+tok).want(t, http.StatusOK)
			if !strings.Contains(string(r.body), "converge_up 1") {
				t.Errorf("token %s: body %q", tok, r.body)
			}
		}
	})

	t.Run("TokensOff", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{Metrics: metricsHandler})
		b.do(http.MethodGet, "/metrics", nil).want(t, http.StatusOK)
	})

	// A dispatch-only pod serves /metrics from net/http, guarded the same.
	t.Run("RequireReadToken", func(t *testing.T) {
		t.Parallel()
		h := api.RequireReadToken([]string{"reader"}, nil, nil, metricsHandler)
		for _, tc := range []struct {
			name, method, auth string
			want               int
		}{
			{"NoToken", http.MethodGet, "", http.StatusUnauthorized},
			{"WrongToken", http.MethodGet, "Bearer guess", http.StatusUnauthorized},
			{"ReadToken", http.MethodGet, "Bearer reader", http.StatusOK},
			{"ReadTokenWrites", http.MethodPost, "Bearer reader", http.StatusForbidden},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req := httptest.NewRequest(tc.method, "/metrics", nil)
				if tc.auth != "" {
					req.Header.Set("Authorization", tc.auth)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != tc.want {
					t.Fatalf("status %d, want %d: %s", w.Code, tc.want, w.Body)
				}
				if tc.want != http.StatusOK && w.Header().Get("Content-Type") != api.ProblemContentType {
					t.Errorf("Content-Type %q", w.Header().Get("Content-Type"))
				}
				if tc.want == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			})
		}
		open := api.RequireReadToken(nil, nil, nil, metricsHandler)
		w := httptest.NewRecorder()
		open.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if w.Code != http.StatusOK {
			t.Errorf("without tokens: status %d, want 200", w.Code)
		}
	})
}

// TestRequestMetrics drives the API and reads its registry: requests are
// counted by route template (never the raw path), method and status; what
// no route answered is one "unrouted" series; the event stream is counted
// but never timed as one endless request.
func TestRequestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setupEvents(t, api.Config{AdminTokens: []string{"admin"}, MetricsRegistry: reg}, api.EventHubConfig{})
	call := func(method, path, body string, auth bool) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, b.base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if auth {
			req.Header.Set("Authorization", "Bearer admin")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, body string
		auth               bool
		want               int
	}{
		{http.MethodPut, "/api/v1/kinds/noop/manifest", `{"kind_version":1,"reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`, true, 201},
		{http.MethodPost, "/api/v1/resources", `{"kind":"noop","kind_version":1,"name":"n0"}`, true, 201},
		{http.MethodGet, "/api/v1/resources/noop/n0", "", true, 200},
		{http.MethodGet, "/api/v1/resources/noop/n1", "", true, 404},
		{http.MethodHead, "/api/v1/resources/noop/n0", "", true, 200},
		{http.MethodPost, "/api/v1/resources:batch", `{"items":"no"}`, true, 400},
		{http.MethodGet, "/api/v1/no/such/route", "", true, 404},
		{http.MethodGet, "/api/v1/resources/noop/n0", "", false, 401},
	} {
		if got := call(c.method, c.path, c.body, c.auth); got != c.want {
			t.Fatalf("%s %s = %d, want %d", c.method, c.path, got, c.want)
		}
	}
	s := b.open(t, "Authorization: Bearer admin", "")
	if s.resp.StatusCode != http.StatusOK {
		t.Fatalf("stream = %d", s.resp.StatusCode)
	}

	requests := map[string]float64{}
	timed := map[string]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			switch mf.GetName() {
			case "converge_api_requests_total":
				requests[l["method"]+" "+l["route"]+" "+l["code"]] = m.GetCounter().GetValue()
			case "converge_api_request_duration_seconds":
				timed[l["method"]+" "+l["route"]] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	for _, want := range []string{
		"PUT /api/v1/kinds/{kind}/manifest 201",
		"POST /api/v1/resources 201",
		"GET /api/v1/resources/{kind}/{name} 200",
		"GET /api/v1/resources/{kind}/{name} 404",
		"HEAD /api/v1/resources/{kind}/{name} 200",
		"POST /api/v1/resources:batch 400",
		"GET unrouted 404",
		"GET unrouted 401",
		"GET /api/v1/events/stream 200",
	} {
		if requests[want] != 1 {
			t.Errorf("requests{%s} = %v, want 1", want, requests[want])
		}
	}
	for k := range requests {
		if strings.Contains(k, "n0") || strings.Contains(k, "noop") || strings.Contains(k, "no/such") {
			t.Errorf("a raw path became a label: %s", k)
		}
	}
	if n := timed["GET /api/v1/resources/{kind}/{name}"]; n != 2 {
		t.Errorf("GET /resources/{kind}/{name} timed %d times, want 2", n)
	}
	if n, ok := timed["GET /api/v1/events/stream"]; ok {
		t.Errorf("the event stream was timed (%d)", n)
	}
}
