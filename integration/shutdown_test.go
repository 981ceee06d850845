package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/webhooksdk"
)

// readyEcho is an echo leaf that is always ready; the test answers its
// tasks itself.
type readyEcho struct{}

func (readyEcho) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "echo", Version: 1}
}
func (readyEcho) Work(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
	return webhooksdk.Outcome{}, nil
}

// TestShutdownReleasesWithinBudget: a pod stopping (SIGTERM: its context
// ends, then Stop) with a delivery stuck in flight waits SHUTDOWN_TIMEOUT,
// then releases the task: claimable again at once, its claim epoch kept,
// rather than held until its 60 s lease lapses. Another pod completes it,
// and the first claim's late outcome is refused by the epoch fence.
func TestShutdownReleasesWithinBudget(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{noDrain: true})
	key := func() []byte { b := make([]byte, 32); _, _ = rand.Read(b); return b }
	base := convergecli.Config{DatabaseURL: e.db.DSN, Role: convergecli.RoleAll, ListenAddr: "127.0.0.1:0",
		HealthAddr: "127.0.0.1:0", ReaperRetryWindow: 30 * time.Second, Dev: true, SecretKey: key(), CallbackKey: key()}

	ctxA, sigterm := context.WithCancel(t.Context())
	defer sigterm()
	cfgA := base
	cfgA.MemberID, cfgA.ShutdownTimeout = "pod-a", time.Second
	a, err := convergecli.Start(ctxA, cfgA, e.log)
	must(t, err)
	stopA := sync.OnceValue(a.Stop)
	t.Cleanup(func() { _ = stopA() })
	s := &server{t: t, db: e.db, base: "http://" + a.Addr(), engine: e}
	if code, body := s.call("PUT", "/kinds/echo/manifest", map[string]any{"kind": "echo", "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	// The SDK answers the health probes; the tasks are answered here: the
	// first hangs until its request is cancelled, later ones succeed.
	var (
		mu    sync.Mutex
		first *webhooksdk.Envelope
		runs  atomic.Int32
	)
	s.serveProviderWith("echo", endpointExtras{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			var env webhooksdk.Envelope
			if json.Unmarshal(body, &env) != nil || env.Type != webhooksdk.EnvelopeTask {
				r.Body = io.NopCloser(bytes.NewReader(body))
				h.ServeHTTP(w, r)
				return
			}
			if runs.Add(1) == 1 {
				mu.Lock()
				first = &env
				mu.Unlock()
				<-r.Context().Done()
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(webhooksdk.Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch,
				Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{"by":"second"}`)}})
		})
	}, readyEcho{})
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "echo", "kind_version": 1, "name": "e1", "spec": map[string]any{}}); code != 201 {
		t.Fatalf("apply = %d %s", code, body)
	}
	waitFor(t, 20*time.Second, "the first delivery to stall", func() bool { return runs.Load() == 1 })
	mu.Lock()
	env := *first
	mu.Unlock()

	start := time.Now()
	sigterm() // as Serve does on SIGTERM: the context ends, then Stop
	must(t, stopA())
	if took := time.Since(start); took < 900*time.Millisecond || took > 10*time.Second {
		t.Errorf("Stop took %s with SHUTDOWN_TIMEOUT=1s and a delivery stuck in flight", took)
	}
	if n := e.count(`SELECT count(*) FROM work_queue WHERE task_id = $1 AND state = 'pending' AND claimed_by IS NULL
		AND not_before <= now() AND attempts = 0 AND claim_epoch = $2`, env.TaskID, env.ClaimEpoch); n != 1 {
		t.Fatal("after Stop the task is not claimable at once, unburnt, at its claim epoch")
	}

	cfgB := base
	cfgB.MemberID = "pod-b"
	b, err := convergecli.Start(t.Context(), cfgB, e.log)
	must(t, err)
	t.Cleanup(func() { must(t, b.Stop()) })
	// Well inside the first claim's 60 s lease.
	e.waitPhase("echo", "e1", "Ready", 20*time.Second)
	if runs.Load() != 2 {
		t.Errorf("the provider ran %d times, want 2", runs.Load())
	}

	// The first claim's outcome, late: refused, and nothing changes.
	late, _ := json.Marshal(webhooksdk.Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch,
		Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{"by":"first"}`)}})
	_, path, ok := strings.Cut(env.Callback.URL, "/v1/tasks/")
	if !ok {
		t.Fatalf("callback URL %q has no /v1/tasks/", env.Callback.URL)
	}
	cb := "http://" + b.Addr() + "/v1/tasks/" + path
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, cb, bytes.NewReader(late))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+env.Callback.Token)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("the released claim's late outcome = %d, want 409", resp.StatusCode)
	}
	if r, _ := e.get("echo", "e1"); !strings.Contains(string(r.Status), "second") {
		t.Errorf("status after the late outcome = %s, want the second claim's", r.Status)
	}
}
