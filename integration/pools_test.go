package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
)

// blockedAnswer is one answer to a request the lock held.
type blockedAnswer struct {
	code       int
	problem    string // the problem's type
	retryAfter string
	took       time.Duration
}

// TestAPIRequestsCannotStarveTheEngine: a transaction holds a resource's
// row lock while writes to that resource keep twice the API pool's
// connections waiting on it, as a blocking lock and a handful of slow
// requests did in issue 34 (one shared pool of four: GET /kinds and /readyz
// answered 503 after 30 s, and every pod went NotReady together). On a real
// process: /readyz stays 200 on both listeners, the engine converges a
// resource of an unrelated kind, GET /kinds is answered, and each blocked
// write gives up at API_LOCK_TIMEOUT with a 503 problem and Retry-After,
// never a 500, instead of holding its connection for the request timeout.
func TestAPIRequestsCannotStarveTheEngine(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{noDrain: true})
	const poolSize = 4
	p := startProcess(t, withConnParams(t, e.db.DSN, map[string]string{"pool_max_conns": strconv.Itoa(poolSize)}), processOpts{dev: true,
		env: []string{"API_POOL_MAX_CONNS=" + strconv.Itoa(poolSize), "API_LOCK_TIMEOUT=2s", "API_STATEMENT_TIMEOUT=4s"}})
	s := &server{t: t, db: e.db, base: "http://" + p.addr, engine: e}
	for _, m := range []map[string]any{{"kind": "widget", "kind_version": 1},
		{"kind": "echo", "kind_version": 1, "reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}} {
		if code, body := s.call("PUT", "/kinds/"+m["kind"].(string)+"/manifest", m); code != 201 {
			t.Fatalf("manifest %s = %d %s", m["kind"], code, body)
		}
	}
	provider := &echoProvider{}
	provider.ready.Store(true)
	s.serveProvider("echo", provider)
	s.createWidget("locked")

	tx, err := e.db.Pool.Begin(t.Context())
	must(t, err)
	defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // released below; a no-op then
	_, err = tx.Exec(t.Context(), `SELECT 1 FROM resources WHERE kind = 'widget' AND name = 'locked' FOR UPDATE`)
	must(t, err)

	// Writes to the locked resource, kept 2*poolSize in flight until
	// stopping; each writer finishes the one it has in flight.
	var (
		stopping atomic.Bool
		mu       sync.Mutex
		answers  []blockedAnswer
		writers  sync.WaitGroup
	)
	t.Cleanup(func() { // a failed test's writers stop with its context
		stopping.Store(true)
		writers.Wait()
	})
	for i := range 2 * poolSize {
		writers.Go(func() {
			for n := 0; !stopping.Load(); n++ {
				a, err := applyWidget(t.Context(), s.base, "locked", 100*i+n)
				if err != nil {
					if t.Context().Err() == nil {
						t.Errorf("apply while the lock is held: %v", err)
					}
					return
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		})
	}
	waitFor(t, 20*time.Second, "the API pool's connections to wait on the lock", func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) >= poolSize
	})

	readyz := func(when string) {
		t.Helper()
		for _, url := range []string{"http://" + p.health + "/readyz", "http://" + p.addr + "/readyz"} {
			if r := getReadyz(t, url); r.code != http.StatusOK {
				t.Fatalf("%s %s = %d %+v, want 200", url, when, r.code, r)
			}
		}
	}
	readyz("with the API pool waiting on the lock")
	e.apply("echo", "e1", map[string]any{"n": 1})
	waitFor(t, 30*time.Second, "echo/e1 to converge while the lock is held", func() bool {
		p.requireUp()
		readyz("while the engine converges")
		r, ok := e.get("echo", "e1")
		return ok && r.Phase == string(model.PhaseReady)
	})
	begin := time.Now()
	code, body := s.call("GET", "/kinds", nil)
	kindsTook := time.Since(begin)
	if code != http.StatusOK {
		t.Errorf("GET /kinds with the API pool waiting on the lock = %d %s (after %s)", code, body, kindsTook)
	}
	stopping.Store(true)
	writers.Wait()
	must(t, tx.Rollback(t.Context()))

	if len(answers) < 2*poolSize {
		t.Fatalf("only %d blocked writes answered", len(answers))
	}
	for _, a := range answers {
		if a.code != http.StatusServiceUnavailable || a.problem != "urn:converge:problem:unavailable" || a.retryAfter == "" ||
			a.took > 15*time.Second {
			t.Errorf("a write held by the lock: %d %s, Retry-After %q, after %s; want a 503 unavailable problem with Retry-After "+
				"within API_LOCK_TIMEOUT (2s), well before the 30s request timeout", a.code, a.problem, a.retryAfter, a.took)
		}
	}
	t.Logf("%d writes refused while the lock was held; GET /kinds took %s", len(answers), kindsTook)
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "widget", "kind_version": 1, "name": "locked",
		"spec": map[string]any{"n": -1}}); code != http.StatusOK {
		t.Errorf("apply once the lock is released = %d %s", code, body)
	}
}

// applyWidget applies widget/name with spec {"n": n} and reports the answer.
func applyWidget(ctx context.Context, base, name string, n int) (blockedAnswer, error) {
	b, _ := json.Marshal(map[string]any{"kind": "widget", "kind_version": 1, "name": name, "spec": map[string]any{"n": n}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/resources", bytes.NewReader(b))
	if err != nil {
		return blockedAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	begin := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return blockedAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return blockedAnswer{}, err
	}
	var problem struct{ Type string }
	_ = json.Unmarshal(body, &problem) // a success has no type: the check names the status
	return blockedAnswer{code: resp.StatusCode, problem: problem.Type, retryAfter: resp.Header.Get("Retry-After"), took: time.Since(begin)}, nil
}
