package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
		h := api.RequireReadToken([]string{"reader"}, nil, metricsHandler)
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
		open := api.RequireReadToken(nil, nil, metricsHandler)
		w := httptest.NewRecorder()
		open.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if w.Code != http.StatusOK {
			t.Errorf("without tokens: status %d, want 200", w.Code)
		}
	})
}
