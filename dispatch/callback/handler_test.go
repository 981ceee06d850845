package callback_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/callback"
	"github.com/convergeplane/converge/internal/problem"
	"github.com/convergeplane/converge/internal/testkit/applylog"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/webhooksdk"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var testKey = bytes.Repeat([]byte("k"), 32)

type bundle struct {
	db     *pgtest.Database
	eng    *engine.Engine
	st     *store.Store
	tokens *callback.Tokens
	h      *callback.Handler
	reg    *prometheus.Registry
	ctx    context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.New(t)
	if err := applylog.Install(t.Context(), db.Pool); err != nil {
		t.Fatal(err)
	}
	eng, st := engine.New(db.Pool, engine.Config{}), store.New(db.Pool, store.Config{})
	tokens, err := callback.NewTokens(testKey)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	h, err := callback.NewHandler(callback.Config{Tokens: tokens, Engine: eng, Store: st, MaxBodyBytes: 1 << 10, Metrics: reg,
		AsyncLease: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	b := &bundle{db: db, eng: eng, st: st, tokens: tokens, h: h, reg: reg, ctx: ctx}
	b.exec(t, `INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`)
	return b
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.db.Pool.Exec(b.ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// claimOne creates a resource and claims its task.
func (b *bundle) claimOne(t *testing.T, name string) model.Task {
	t.Helper()
	b.exec(t, `WITH r AS (INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, $1) RETURNING id)
		SELECT schedule_eligible(array_agg(id)) FROM r`, name)
	return b.claim(t)
}

func (b *bundle) claim(t *testing.T) model.Task {
	t.Helper()
	tasks, err := b.eng.TaskClaim(b.ctx, engine.TaskClaimParams{Claimer: "test", Lo: 0, Hi: 255, Limit: 1, Lease: time.Minute})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("claim: %d tasks, %v", len(tasks), err)
	}
	return tasks[0]
}

func (b *bundle) token(t *testing.T, task model.Task, expires time.Time) string {
	t.Helper()
	tok, err := b.tokens.Mint(callback.Claim{TaskID: task.ID, ResourceID: task.ResourceID, Shard: task.Shard, ClaimEpoch: task.ClaimEpoch,
		Emits: task.Emits, Deadline: task.Deadline, Expires: expires})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// post drives the handler over HTTP and logs the exchange.
func (b *bundle) post(t *testing.T, path, token, contentType string, body []byte) (int, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(b.ctx, http.MethodPost, path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if dump, err := httputil.DumpRequest(req, len(body) < 512); err == nil {
		t.Logf("request:\n%s", dump)
	}
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	t.Logf("response: %d %s", rec.Code, rec.Body.String())
	return rec.Code, rec.Body.String()
}

func outcomePath(task model.Task) string { return "/v1/tasks/" + task.ID + "/outcome" }

func okBody(task model.Task) []byte {
	b, _ := json.Marshal(map[string]any{"task_id": task.ID, "claim_epoch": task.ClaimEpoch,
		"outcome": map[string]any{"status": map[string]any{"ok": true}}})
	return b
}

func (b *bundle) state(t *testing.T, task model.Task) (state string, claimEpoch int64, lease *time.Time) {
	t.Helper()
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT state, claim_epoch, lease_until FROM work_queue WHERE task_id = $1`, task.ID).
		Scan(&state, &claimEpoch, &lease); err != nil {
		t.Fatal(err)
	}
	return state, claimEpoch, lease
}

// appliedCount is how many times the task's claim had its (successful)
// outcome applied.
func (b *bundle) appliedCount(t *testing.T, task model.Task) int {
	t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM test_applylog WHERE task_id = $1 AND claim_epoch = $2`,
		task.ID, task.ClaimEpoch).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exp := time.Now().Add(time.Hour)

	t.Run("applied, then a duplicate is a no-op", func(t *testing.T) {
		task := b.claimOne(t, "r1")
		tok := b.token(t, task, exp)
		if code, body := b.post(t, outcomePath(task), tok, "application/json", okBody(task)); code != 200 || !strings.Contains(body, `"applied"`) {
			t.Fatalf("first callback = %d %s, want 200 applied", code, body)
		}
		if code, body := b.post(t, outcomePath(task), tok, "application/json", okBody(task)); code != 200 || !strings.Contains(body, `"duplicate"`) {
			t.Fatalf("repeat callback = %d %s, want 200 duplicate", code, body)
		}
		if n := b.appliedCount(t, task); n != 1 {
			t.Fatalf("the task's outcome was applied %d times, want 1", n)
		}
	})

	t.Run("a late callback after a re-claim is refused and not applied", func(t *testing.T) {
		task := b.claimOne(t, "r2")
		stale := b.token(t, task, exp)
		// The lease lapses, the reaper re-pends, another claim takes it.
		b.exec(t, `UPDATE work_queue SET lease_until = now() - interval '1 second' WHERE task_id = $1`, task.ID)
		if _, err := b.eng.LeaseReapExpired(b.ctx, engine.ReapParams{Lo: 0, Hi: 255, Limit: 100}); err != nil {
			t.Fatal(err)
		}
		again := b.claim(t)
		if again.ID != task.ID || again.ClaimEpoch != task.ClaimEpoch+1 {
			t.Fatalf("re-claim = %s@%d, want %s@%d", again.ID, again.ClaimEpoch, task.ID, task.ClaimEpoch+1)
		}
		if code, _ := b.post(t, outcomePath(task), stale, "application/json", okBody(task)); code != http.StatusConflict {
			t.Fatalf("late callback = %d, want 409", code)
		}
		if st, claimEpoch, _ := b.state(t, task); st != "claimed" || claimEpoch != again.ClaimEpoch || b.appliedCount(t, task) != 0 {
			t.Fatalf("after the late callback: state %s epoch %d applied %d; want still claimed by the new epoch, nothing applied", st, claimEpoch, b.appliedCount(t, task))
		}
		// The current claim's callback is applied.
		if code, _ := b.post(t, outcomePath(again), b.token(t, again, exp), "application/json", okBody(again)); code != 200 {
			t.Fatalf("current callback = %d, want 200", code)
		}
	})

	t.Run("refused tokens", func(t *testing.T) {
		task := b.claimOne(t, "r3")
		other := b.claimOne(t, "r4")
		forger, _ := callback.NewTokens(bytes.Repeat([]byte("x"), 32))
		forged, _ := forger.Mint(callback.Claim{TaskID: task.ID, Shard: task.Shard, ClaimEpoch: task.ClaimEpoch, Expires: exp})
		good := b.token(t, task, exp)
		tampered := []byte(good)
		tampered[10] ^= 1
		cases := map[string]string{
			"no token":       "",
			"forged":         forged,
			"expired":        b.token(t, task, time.Now().Add(-time.Second)),
			"another task's": b.token(t, other, exp),
			"tampered":       string(tampered),
			"garbage":        "not-a-token",
			"truncated":      good[:len(good)-4],
		}
		for name, tok := range cases {
			if code, _ := b.post(t, outcomePath(task), tok, "application/json", okBody(task)); code != http.StatusUnauthorized {
				t.Errorf("%s token: %d, want 401", name, code)
			}
		}
		if st, _, _ := b.state(t, task); st != "claimed" {
			t.Errorf("state %s after refused callbacks, want claimed", st)
		}
		if got := counterValue(t, b.reg, "converge_dispatch_callbacks_total", "unauthorized"); got < float64(len(cases)) {
			t.Errorf("callbacks_total{unauthorized} = %v, want >= %d", got, len(cases))
		}
	})

	t.Run("hostile bodies leave the task claimed", func(t *testing.T) {
		task := b.claimOne(t, "r5")
		tok := b.token(t, task, exp)
		cases := []struct {
			name        string
			contentType string
			body        []byte
			want        int
		}{
			{"oversized", "application/json", append([]byte(`{"outcome":{"status":"`), bytes.Repeat([]byte("a"), 2000)...), 413},
			{"wrong content type", "text/plain", okBody(task), 415},
			{"empty", "application/json", nil, 400},
			{"not json", "application/json", []byte(`{"outcome":`), 400},
			{"neither outcome nor error", "application/json", []byte(`{"task_id":"` + task.ID + `"}`), 400},
			{"both", "application/json", []byte(`{"outcome":{},"error":{"message":"x"}}`), 400},
			{"another epoch in the body", "application/json", []byte(`{"claim_epoch":999,"outcome":{}}`), 400},
			// The decoder read 0 as "absent": a claim at epoch 1 took it.
			{"epoch 0 in the body", "application/json", []byte(`{"task_id":"` + task.ID + `","claim_epoch":0,"outcome":{}}`), 400},
			{"epoch 0 with an error", "application/json", []byte(`{"claim_epoch":0,"error":{"message":"x"}}`), 400},
			{"epoch as a string", "application/json", []byte(fmt.Sprintf(`{"claim_epoch":"%d","outcome":{}}`, task.ClaimEpoch)), 400},
		}
		for _, tc := range cases {
			if code, _ := b.post(t, outcomePath(task), tok, tc.contentType, tc.body); code != tc.want {
				t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
			}
		}
		if st, claimEpoch, _ := b.state(t, task); st != "claimed" || claimEpoch != task.ClaimEpoch || b.appliedCount(t, task) != 0 {
			t.Fatalf("after hostile bodies: state %s epoch %d; want untouched", st, claimEpoch)
		}
		// An endless body is cut at the cap too.
		req := httptest.NewRequestWithContext(b.ctx, http.MethodPost, outcomePath(task), endless{})
		req.Header.Set("Authorization", "Bearer "+tok)
		req.ContentLength = -1
		rec := httptest.NewRecorder()
		b.h.ServeHTTP(rec, req)
		if rec.Code != 413 {
			t.Errorf("endless body: %d, want 413", rec.Code)
		}
	})

	t.Run("an error result is recorded as the task's failure", func(t *testing.T) {
		task := b.claimOne(t, "r6")
		body := []byte(`{"error":{"message":"quota exceeded","terminal":true}}`)
		if code, _ := b.post(t, outcomePath(task), b.token(t, task, exp), "application/json", body); code != 200 {
			t.Fatalf("error callback = %d, want 200", code)
		}
		var msg string
		var term bool
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT last_error, failure_terminal FROM resources WHERE last_task_id = $1 AND last_task_epoch = $2`,
			task.ID, task.ClaimEpoch).Scan(&msg, &term); err != nil {
			t.Fatal(err)
		}
		if msg != "quota exceeded" || !term {
			t.Errorf("resource's failure = %q terminal=%v, want the message, terminal", msg, term)
		}
	})

	t.Run("only POST", func(t *testing.T) {
		req := httptest.NewRequestWithContext(b.ctx, http.MethodGet, "/v1/tasks/x/outcome", nil)
		rec := httptest.NewRecorder()
		b.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("GET = %d, want 405", rec.Code)
		}
	})
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exp := time.Now().Add(time.Hour)
	task := b.claimOne(t, "h1")
	tok := b.token(t, task, exp)
	b.exec(t, `UPDATE work_queue SET lease_until = now() + interval '5 seconds' WHERE task_id = $1`, task.ID)

	hbPath := "/v1/tasks/" + task.ID + "/heartbeat"
	hb, _ := json.Marshal(map[string]any{"task_id": task.ID, "claim_epoch": task.ClaimEpoch})
	if code, _ := b.post(t, hbPath, tok, "application/json", hb); code != 200 {
		t.Fatalf("heartbeat = %d, want 200", code)
	}
	_, _, lease := b.state(t, task)
	if lease == nil || time.Until(*lease) < 80*time.Second {
		t.Fatalf("lease after heartbeat ends in %v, want ~90s (the async lease)", lease)
	}
	if code, _ := b.post(t, hbPath, tok, "", nil); code != 200 {
		t.Fatalf("empty heartbeat = %d, want 200", code)
	}
	if code, _ := b.post(t, hbPath, "bogus", "application/json", hb); code != 401 {
		t.Fatalf("heartbeat with a bad token = %d, want 401", code)
	}
	// An explicit claim_epoch must be the token's; 0 is not "absent".
	if code, _ := b.post(t, hbPath, tok, "application/json", []byte(`{"task_id":"`+task.ID+`","claim_epoch":0}`)); code != 400 {
		t.Fatalf("heartbeat with claim_epoch 0 = %d, want 400", code)
	}

	t.Run("a deadline caps the extension", func(t *testing.T) {
		task := b.claimOne(t, "h2")
		task.Deadline = time.Now().Add(10 * time.Second)
		tok := b.token(t, task, exp)
		if code, _ := b.post(t, "/v1/tasks/"+task.ID+"/heartbeat", tok, "", nil); code != 200 {
			t.Fatalf("heartbeat = %d", code)
		}
		_, _, lease := b.state(t, task)
		// deadline (10s) + grace (1m default) — not the 90s async lease.
		if d := time.Until(*lease); d < 65*time.Second || d > 75*time.Second {
			t.Fatalf("lease ends in %s, want ~70s (deadline + grace)", d)
		}
	})

	t.Run("a superseded claim gets 409", func(t *testing.T) {
		if _, err := b.eng.TaskComplete(b.ctx, task, webhooksdk.Result{Outcome: &webhooksdk.Outcome{}}); err != nil {
			t.Fatal(err)
		}
		if code, _ := b.post(t, hbPath, tok, "application/json", hb); code != http.StatusConflict {
			t.Fatalf("heartbeat after completion = %d, want 409", code)
		}
	})
}

// TestTokensSetKeys walks a rotation from key A to B on one Tokens in use:
// first B only verifies (pending), then B mints and A still verifies; a
// key too short is refused and the keys in use stay.
func TestTokensSetKeys(t *testing.T) {
	t.Parallel()
	keyA, keyB := bytes.Repeat([]byte("a"), 32), bytes.Repeat([]byte("b"), 48)
	onlyA, _ := callback.NewTokens(keyA)
	onlyB, _ := callback.NewTokens(keyB)
	now := time.Now()
	c := callback.Claim{TaskID: "0195a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Expires: now.Add(time.Hour)}
	mint := func(tk *callback.Tokens) string {
		t.Helper()
		tok, err := tk.Mint(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tokA, tokB := mint(onlyA), mint(onlyB)
	tk, err := callback.NewTokens(keyA)
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.SetKeys(keyA, keyB); err != nil {
		t.Fatal(err)
	}
	if _, err := onlyA.Verify(mint(tk), now); err != nil {
		t.Errorf("B pending: the token minted is not A's: %v", err)
	}
	if _, err := tk.Verify(tokB, now); err != nil {
		t.Errorf("B pending: B's token: %v", err)
	}
	if err := tk.SetKeys(keyB, keyA); err != nil {
		t.Fatal(err)
	}
	if _, err := onlyB.Verify(mint(tk), now); err != nil {
		t.Errorf("B current: the token minted is not B's: %v", err)
	}
	if _, err := tk.Verify(tokA, now); err != nil {
		t.Errorf("B current: A's token: %v", err)
	}
	if err := tk.SetKeys(keyB, []byte("short")); err == nil {
		t.Error("a 5-byte previous key was taken")
	}
	if _, err := tk.Verify(tokA, now); err != nil {
		t.Errorf("after a refused SetKeys: A's token: %v", err)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	old := bytes.Repeat([]byte("o"), 32)
	tk, err := callback.NewTokens(testKey, old)
	if err != nil {
		t.Fatal(err)
	}
	oldOnly, _ := callback.NewTokens(old)
	now := time.Now()
	c := callback.Claim{TaskID: "0195A1B2-C3D4-7E5F-8a9b-0c1d2e3f4a5b", ResourceID: "0195a1b2-0000-7e5f-8a9b-0c1d2e3f4a5c", Shard: 201, ClaimEpoch: 1 << 40, Emits: 0x99,
		Endpoint: "vpc-eu-west-1", Attempt: 3, Issued: now.Truncate(time.Millisecond),
		Deadline: now.Add(time.Minute).Truncate(time.Millisecond), Expires: now.Add(time.Hour).Truncate(time.Second)}
	tok, err := tk.Mint(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tk.Verify(tok, now)
	if err != nil {
		t.Fatal(err)
	}
	c.TaskID = strings.ToLower(c.TaskID)
	if !got.Deadline.Equal(c.Deadline) || !got.Expires.Equal(c.Expires) || got.TaskID != c.TaskID || got.ResourceID != c.ResourceID || got.Endpoint != c.Endpoint ||
		got.Attempt != c.Attempt || !got.Issued.Equal(c.Issued) || got.Shard != c.Shard || got.ClaimEpoch != c.ClaimEpoch || got.Emits != c.Emits {
		t.Fatalf("round trip = %+v, want %+v", got, c)
	}
	// A token minted with the previous key still verifies after a rotation.
	prev, _ := oldOnly.Mint(c)
	if _, err := tk.Verify(prev, now); err != nil {
		t.Errorf("a previous key's token: %v", err)
	}
	if _, err := oldOnly.Verify(tok, now); err == nil {
		t.Error("a token of the new key verified with only the old one")
	}
	if _, err := tk.Verify(tok, c.Expires); err == nil {
		t.Error("a token verified at its expiry")
	}
	// The endpoint name is signed like the rest; a cut token is refused.
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-sha256.Size-1] ^= 1 // the endpoint name's last byte
	if _, err := tk.Verify(base64.RawURLEncoding.EncodeToString(raw), now); err == nil {
		t.Error("a token with an altered endpoint verified")
	}
	if _, err := tk.Verify(tok[:len(tok)-4], now); err == nil {
		t.Error("a truncated token verified")
	}
	if _, err := tk.Mint(callback.Claim{TaskID: c.TaskID, Endpoint: strings.Repeat("e", 256)}); err == nil {
		t.Error("minted a token with a 256-byte endpoint name")
	}
	if _, err := tk.Mint(callback.Claim{TaskID: "nope"}); err == nil {
		t.Error("minted a token for a non-UUID task id")
	}
	if _, err := callback.NewTokens([]byte("short")); err == nil {
		t.Error("a short key was accepted")
	}
}

// TestConcurrentCallbacksGroupCommit fires many callbacks at once — fresh
// ones, repeats and stale ones — and checks each gets its own answer while
// they are written together.
func TestConcurrentCallbacksGroupCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exp := time.Now().Add(time.Hour)
	const n = 40
	b.exec(t, `WITH r AS (INSERT INTO resources (kind, kind_version, name) SELECT 'leaf', 1, 'g' || i FROM generate_series(1, $1) i RETURNING id)
		SELECT schedule_eligible(array_agg(id)) FROM r`, n)
	tasks, err := b.eng.TaskClaim(b.ctx, engine.TaskClaimParams{Claimer: "test", Lo: 0, Hi: 255, Limit: n, Lease: time.Minute})
	if err != nil || len(tasks) != n {
		t.Fatalf("claim: %d, %v", len(tasks), err)
	}
	type call struct {
		task model.Task
		want int
	}
	var calls []call
	for i, task := range tasks {
		switch i % 4 {
		case 0: // stale: a token for an epoch the task never had
			stale := task
			stale.ClaimEpoch--
			calls = append(calls, call{stale, http.StatusConflict})
		default:
			calls = append(calls, call{task, http.StatusOK})
			if i%4 == 3 { // and a concurrent repeat of the same callback
				calls = append(calls, call{task, http.StatusOK})
			}
		}
	}
	codes := make([]int, len(calls))
	done := make(chan struct{})
	for i, c := range calls {
		go func() {
			defer func() { done <- struct{}{} }()
			req := httptest.NewRequestWithContext(b.ctx, http.MethodPost, outcomePath(c.task), bytes.NewReader(okBody(c.task)))
			req.Header.Set("Authorization", "Bearer "+b.token(t, c.task, exp))
			rec := httptest.NewRecorder()
			b.h.ServeHTTP(rec, req)
			codes[i] = rec.Code
		}()
	}
	for range calls {
		<-done
	}
	for i, c := range calls {
		if codes[i] != c.want {
			t.Errorf("callback %d (epoch %d): %d, want %d", i, c.task.ClaimEpoch, codes[i], c.want)
		}
	}
	var applied int
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM test_applylog`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != n*3/4 {
		t.Errorf("%d outcomes applied, want %d (each current claim once)", applied, n*3/4)
	}
	if got := counterValue(t, b.reg, "converge_dispatch_callbacks_total", "applied") + counterValue(t, b.reg, "converge_dispatch_callbacks_total", "duplicate"); got != float64(len(calls)-n/4) {
		t.Errorf("applied+duplicate = %v, want %d", got, len(calls)-n/4)
	}
}

// TestCallbackLogDoesNotHoldWrites: a batch's delivery-log insert, blocked
// here on a table lock, does not hold back the next batch's write.
func TestCallbackLogDoesNotHoldWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exp := time.Now().Add(time.Hour)
	logged, next := b.claimOne(t, "logged"), b.claimOne(t, "next")
	tx, err := b.db.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // committed below; a failed test's rollback needs no check
	if _, err := tx.Exec(b.ctx, `LOCK TABLE endpoint_deliveries IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	first := make(chan int, 1)
	go func() {
		// A token naming an endpoint: its applied callback is logged.
		tok, err := b.tokens.Mint(callback.Claim{TaskID: logged.ID, ResourceID: logged.ResourceID, Shard: logged.Shard,
			ClaimEpoch: logged.ClaimEpoch, Emits: logged.Emits, Endpoint: "ep", Expires: exp})
		if err != nil {
			first <- 0
			return
		}
		req := httptest.NewRequestWithContext(b.ctx, http.MethodPost, outcomePath(logged), bytes.NewReader(okBody(logged)))
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		b.h.ServeHTTP(rec, req)
		first <- rec.Code
	}()
	for {
		var waiting int
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if b.appliedCount(t, logged) != 1 {
		t.Fatal("the logged callback's outcome is not applied before its log insert")
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, outcomePath(next), bytes.NewReader(okBody(next)))
	req.Header.Set("Authorization", "Bearer "+b.token(t, next, exp))
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("callback behind a blocked log insert = %d %s, want 200 meanwhile", rec.Code, rec.Body.String())
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if code := <-first; code != http.StatusOK {
		t.Fatalf("logged callback = %d once the lock was released, want 200", code)
	}
}

// TestPayload: a callback token reads its own task's request while its
// claim holds, and nothing else: another task's id is 401, a lapsed claim
// is 409.
func TestPayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	task := b.claimOne(t, "p1")
	other := b.claimOne(t, "p2")
	tok := b.token(t, task, time.Now().Add(time.Minute))
	get := func(id, token string) (int, string) {
		t.Helper()
		req := httptest.NewRequestWithContext(b.ctx, http.MethodGet, "/v1/tasks/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		b.h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}

	code, body := get(task.ID, tok)
	var env webhooksdk.Envelope
	if code != http.StatusOK || json.Unmarshal([]byte(body), &env) != nil {
		t.Fatalf("GET = %d %s", code, body)
	}
	if env.Type != webhooksdk.EnvelopeTask || env.TaskID != task.ID || env.ClaimEpoch != task.ClaimEpoch ||
		env.Resource == nil || env.Resource.Name != "p1" || env.Callback != nil || env.PayloadURL != "" {
		t.Errorf("payload = %s", body)
	}
	if code, body := get(other.ID, tok); code != http.StatusUnauthorized {
		t.Errorf("another task's payload = %d %s, want 401", code, body)
	}
	if code, body := get(task.ID, "nonsense"); code != http.StatusUnauthorized {
		t.Errorf("bad token = %d %s, want 401", code, body)
	}
	// The claim is given back: the old token reads nothing.
	if err := b.eng.TaskRelease(b.ctx, engine.TaskReleaseParams{Tasks: []model.Task{task}, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if code, body := get(task.ID, tok); code != http.StatusConflict {
		t.Errorf("superseded claim's payload = %d %s, want 409", code, body)
	}
	if got := counterValue(t, b.reg, "converge_dispatch_payloads_total", "served"); got != 1 {
		t.Errorf("payloads_total{served} = %v, want 1", got)
	}
}

// TestRefusalsAreProblemDocuments: every refusal of the callback routes,
// the router's own 404 and 405 included, is a problem document of the
// project's types (internal/problem), never about:blank or plain text.
func TestRefusalsAreProblemDocuments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	task := b.claimOne(t, "r1")
	tok := b.token(t, task, time.Now().Add(time.Hour))
	for _, tc := range []struct {
		name, method, path, token, contentType string
		body                                   []byte
		want                                   int
	}{
		{"no token", http.MethodPost, outcomePath(task), "", "application/json", okBody(task), http.StatusUnauthorized},
		{"not JSON", http.MethodPost, outcomePath(task), tok, "text/plain", okBody(task), http.StatusUnsupportedMediaType},
		{"over the cap", http.MethodPost, outcomePath(task), tok, "application/json", bytes.Repeat([]byte(" "), 2<<10), http.StatusRequestEntityTooLarge},
		{"malformed", http.MethodPost, outcomePath(task), tok, "application/json", []byte(`{"outcome":`), http.StatusBadRequest},
		{"not a batch", http.MethodPost, "/v1/tasks/outcomes", "", "application/json", []byte(`[]`), http.StatusBadRequest},
		{"heartbeat of another task", http.MethodPost, "/v1/tasks/" + task.ID + "/heartbeat", tok, "application/json",
			[]byte(`{"task_id":"00000000-0000-0000-0000-000000000000"}`), http.StatusBadRequest},
		{"wrong method", http.MethodPut, outcomePath(task), tok, "", nil, http.StatusMethodNotAllowed},
		{"no such route", http.MethodPost, "/v1/tasks/" + task.ID + "/nothing", tok, "", nil, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequestWithContext(b.ctx, tc.method, tc.path, bytes.NewReader(tc.body))
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			rec := httptest.NewRecorder()
			b.h.ServeHTTP(rec, req)
			t.Logf("%s %s: %d %s %s", tc.method, tc.path, rec.Code, rec.Header(), rec.Body)
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d", rec.Code, tc.want)
			}
			if ct := rec.Header().Get("Content-Type"); ct != problem.ContentType {
				t.Errorf("Content-Type %q, want %s", ct, problem.ContentType)
			}
			var p problem.Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("not a problem document: %v", err)
			}
			if p.Type != problem.TypeFor(tc.want) || p.Status != tc.want || p.Title != http.StatusText(tc.want) ||
				p.Detail == "" || p.Errors == nil || p.Instance != tc.path {
				t.Errorf("problem %+v, want type %s, status %d, a title, a detail, errors and instance %s",
					p, problem.TypeFor(tc.want), tc.want, tc.path)
			}
			if tc.want == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
				t.Error("a 405 without Allow")
			}
		})
	}
}
