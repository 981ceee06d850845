package webhooksdk_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// unready has Ready and no OnConfig.
type unready struct{}

func (unready) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "unready", Version: 1}
}
func (unready) Ready() bool { return false }
func (unready) Work(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
	return webhooksdk.Outcome{}, nil
}

// configured has OnConfig and no Ready; it records its calls.
type configured struct{ calls []string }

func (*configured) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "configured", Version: 1}
}

func (c *configured) OnConfig(cfg webhooksdk.ProviderConfig) {
	c.calls = append(c.calls, "config:"+string(cfg.Spec))
}

func (c *configured) Work(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
	c.calls = append(c.calls, "work")
	return webhooksdk.Outcome{}, nil
}

// TestOptionalHooks serves providers with and without Ready and OnConfig side by side:
// one without Ready is ready, one without OnConfig still gets its config in the
// request, and each hook a provider has is called.
func TestOptionalHooks(t *testing.T) {
	t.Parallel()
	var bareConfig string
	bare := webhooksdk.WorkFunc("bare", 1, func(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		bareConfig = string(req.Config)
		return webhooksdk.Outcome{Status: json.RawMessage(`{"bare":true}`)}, nil
	})
	cfg := &configured{}
	ep, err := webhooksdk.Handler([]webhooksdk.Provider{bare, unready{}, cfg},
		webhooksdk.WithSecrets(vectorSecret), webhooksdk.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ep.Shutdown(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		t.Helper()
		w := httptest.NewRecorder()
		ep.ServeHTTP(w, r)
		return w
	}

	w := serve(sdktest.NewHealthRequest(t, vectorSecret))
	var health webhooksdk.HealthResponse
	if err := json.Unmarshal(w.Body.Bytes(), &health); w.Code != http.StatusOK || err != nil {
		t.Fatalf("health: %d %s", w.Code, w.Body)
	}
	want := []webhooksdk.KindReadiness{
		{Kind: "bare", KindVersion: 1, Ready: true},
		{Kind: "unready", KindVersion: 1, Ready: false},
		{Kind: "configured", KindVersion: 1, Ready: true},
	}
	if diff := cmp.Diff(want, health.Kinds); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}

	task := func(kind string) *httptest.ResponseRecorder {
		t.Helper()
		env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: kind, Version: 1})
		env.Config = json.RawMessage(`{"a":1}`)
		return serve(sdktest.NewTaskRequest(t, vectorSecret, env))
	}
	w = task("bare")
	if res := decodeResult(t, w.Body.Bytes()); w.Code != http.StatusOK || res.Outcome == nil || string(res.Outcome.Status) != `{"bare":true}` {
		t.Errorf("bare task: %d %s, want 200 with its status", w.Code, w.Body)
	}
	if bareConfig != `{"a":1}` {
		t.Errorf("bare Work got config %q, want the envelope's", bareConfig)
	}
	if w = task("unready"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("unready task: %d %s, want 503", w.Code, w.Body)
	}
	if w = task("configured"); w.Code != http.StatusOK {
		t.Errorf("configured task: %d %s, want 200", w.Code, w.Body)
	}
	if diff := cmp.Diff([]string{`config:{"a":1}`, "work"}, cfg.calls); diff != "" {
		t.Errorf("configured's calls (-want +got):\n%s", diff)
	}
}

func TestWorkFuncNilRefused(t *testing.T) {
	t.Parallel()
	_, err := webhooksdk.Handler([]webhooksdk.Provider{webhooksdk.WorkFunc("bare", 1, nil)}, webhooksdk.WithSecrets(vectorSecret))
	if err == nil || !strings.Contains(err.Error(), "nil func") {
		t.Errorf("Handler with a nil WorkFunc: err = %v, want one naming the nil func", err)
	}
}

func TestWorkFuncKind(t *testing.T) {
	t.Parallel()
	p := webhooksdk.WorkFunc("bucket", 3, func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
		return webhooksdk.Outcome{}, nil
	})
	if got := p.Kind(); got != (webhooksdk.KindVersion{Kind: "bucket", Version: 3}) {
		t.Errorf("Kind() = %v, want bucket/v3", got)
	}
	if _, err := webhooksdk.Handler([]webhooksdk.Provider{webhooksdk.WorkFunc("", 1, p.Work)}, webhooksdk.WithSecrets(vectorSecret)); err == nil {
		t.Error("Handler accepted a WorkFunc with an empty kind")
	}
}
