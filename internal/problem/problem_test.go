package problem_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/convergeplane/converge/internal/problem"
)

// TestTypeFor: every error status has a type of the project's own.
func TestTypeFor(t *testing.T) {
	t.Parallel()
	for status := 400; status < 600; status++ {
		if typ := problem.TypeFor(status); !strings.HasPrefix(typ, "urn:converge:problem:") {
			t.Errorf("TypeFor(%d) = %q", status, typ)
		}
	}
}

// TestHandler: a plain-text error (http.Error, as http.ServeMux answers an
// unknown route or method) goes out as a problem document whose detail is
// not the plain text; every other answer passes as written.
func TestHandler(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("fine")) })
	mux.HandleFunc("GET /teapot", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(`{"own":"body"}`))
	})
	mux.HandleFunc("GET /oops", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "secret internals", http.StatusInternalServerError)
	})
	h := problem.Handler(mux)
	serve := func(method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		t.Logf("%s %s: %d %v %s", method, path, rec.Code, rec.Header(), rec.Body)
		return rec
	}
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/nowhere", http.StatusNotFound},
		{http.MethodPost, "/ok", http.StatusMethodNotAllowed},
		{http.MethodGet, "/oops", http.StatusInternalServerError},
	} {
		rec := serve(tc.method, tc.path)
		var p problem.Problem
		if rec.Code != tc.status || rec.Header().Get("Content-Type") != problem.ContentType ||
			json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Type != problem.TypeFor(tc.status) || p.Instance != tc.path {
			t.Errorf("%s %s = %d %q %s, want a %d problem", tc.method, tc.path, rec.Code, rec.Header().Get("Content-Type"), rec.Body, tc.status)
		}
		if strings.Contains(rec.Body.String(), "secret") || rec.Header().Get("X-Content-Type-Options") != "" {
			t.Errorf("%s %s: the plain text or its headers went out: %v %s", tc.method, tc.path, rec.Header(), rec.Body)
		}
	}
	if rec := serve(http.MethodPost, "/ok"); rec.Header().Get("Allow") == "" {
		t.Error("the 405 lost its Allow header")
	}
	if rec := serve(http.MethodGet, "/ok"); rec.Code != http.StatusOK || rec.Body.String() != "fine" {
		t.Errorf("GET /ok = %d %s", rec.Code, rec.Body)
	}
	if rec := serve(http.MethodGet, "/teapot"); rec.Code != http.StatusTeapot || rec.Body.String() != `{"own":"body"}` {
		t.Errorf("GET /teapot = %d %s, want its own answer", rec.Code, rec.Body)
	}
}
