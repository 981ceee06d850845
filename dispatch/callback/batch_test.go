package callback_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/dispatch/callback"
	"github.com/convergeplane/converge/webhooksdk"
)

// postBatch drives the batched callback route with a CallbackBatch body.
func (b *bundle) postBatch(t *testing.T, h http.Handler, body []byte) (int, webhooksdk.CallbackBatchAnswer, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(b.ctx, http.MethodPost, "/v1/tasks/outcomes", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	t.Logf("response: %d %s", rec.Code, rec.Body.String())
	var a webhooksdk.CallbackBatchAnswer
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
			t.Fatalf("answer is not a CallbackBatchAnswer: %v", err)
		}
	}
	return rec.Code, a, rec.Body.String()
}

// TestBatchedOutcomes: each item of a batched callback is authorized by its
// own token and settled as a single callback of it would be; one bad item
// changes nothing for the others.
func TestBatchedOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exp := time.Now().Add(time.Hour)
	b.exec(t, `WITH r AS (INSERT INTO resources (kind, kind_version, name) SELECT 'leaf', 1, 'b' || i FROM generate_series(1, 6) i RETURNING id)
		SELECT schedule_eligible(array_agg(id)) FROM r`)
	tasks, err := b.eng.TaskClaim(b.ctx, engine.TaskClaimParams{Claimer: "test", Lo: 0, Hi: 255, Limit: 6, Lease: time.Minute})
	if err != nil || len(tasks) != 6 {
		t.Fatalf("claim: %d, %v", len(tasks), err)
	}
	// tasks[2] was already called back on its own: the batch's copy is a duplicate.
	if code, _ := b.post(t, outcomePath(tasks[2]), b.token(t, tasks[2], exp), "application/json", okBody(tasks[2])); code != 200 {
		t.Fatalf("single callback = %d", code)
	}
	failed, _ := json.Marshal(map[string]any{"task_id": tasks[1].ID, "error": map[string]any{"message": "quota exceeded"}})
	stale := tasks[4]
	stale.ClaimEpoch++ // a claim the task never had: superseded
	item := func(tok string, res []byte) webhooksdk.CallbackItem {
		return webhooksdk.CallbackItem{Token: tok, Result: res}
	}
	items := []webhooksdk.CallbackItem{
		item(b.token(t, tasks[0], exp), okBody(tasks[0])),
		item(b.token(t, tasks[1], exp), failed),
		item(b.token(t, tasks[2], exp), okBody(tasks[2])),
		item("not-a-token", okBody(tasks[3])),
		item(b.token(t, stale, exp), okBody(stale)),
		item(b.token(t, tasks[5], exp), []byte(`{"task_id":"`+tasks[5].ID+`"}`)), // neither outcome nor error
		item(b.token(t, tasks[0], exp), okBody(tasks[0])),                        // the same task twice
	}
	body, _ := json.Marshal(webhooksdk.CallbackBatch{Outcomes: items})
	h := b.bigHandler(t)
	code, a, raw := b.postBatch(t, h, body)
	if code != http.StatusOK || len(a.Results) != len(items) {
		t.Fatalf("batch = %d %s, want 200 with %d results", code, raw, len(items))
	}
	want := []struct {
		status int
		result string
	}{{200, "applied"}, {200, "applied"}, {200, "duplicate"}, {401, ""}, {409, ""}, {400, ""}, {400, ""}}
	for i, w := range want {
		if got := a.Results[i]; got.Status != w.status || got.Result != w.result {
			t.Errorf("item %d = %+v, want status %d result %q", i, got, w.status, w.result)
		}
	}
	for i, want := range []int{1, 0, 1, 0, 0, 0} { // task 1 failed: not a success
		if n := b.appliedCount(t, tasks[i]); n != want {
			t.Errorf("task %d: %d successes applied, want %d", i, n, want)
		}
	}
	var failure string
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT coalesce(last_error, '') FROM resources WHERE id = $1 AND last_task_id = $2
		AND last_task_epoch = $3`, tasks[1].ResourceID, tasks[1].ID, tasks[1].ClaimEpoch).Scan(&failure); err != nil || failure != "quota exceeded" {
		t.Errorf("task 1's resource: failure %q (%v), want its claim's quota exceeded", failure, err)
	}
	if st, _, _ := b.state(t, tasks[5]); st != "claimed" {
		t.Errorf("the malformed item's task is %s, want still claimed (its lease decides)", st)
	}

	t.Run("refused whole", func(t *testing.T) {
		too := make([]webhooksdk.CallbackItem, webhooksdk.MaxCallbackBatch+1)
		for i := range too {
			too[i] = item("x", []byte(`{}`))
		}
		tooBody, _ := json.Marshal(webhooksdk.CallbackBatch{Outcomes: too})
		for name, c := range map[string]struct {
			body []byte
			want int
		}{
			"not json":     {[]byte(`{"outcomes":`), http.StatusBadRequest},
			"no outcomes":  {[]byte(`{"results":[]}`), http.StatusBadRequest},
			"over the cap": {tooBody, http.StatusRequestEntityTooLarge},
		} {
			if code, _, raw := b.postBatch(t, h, c.body); code != c.want || !strings.Contains(raw, `"status"`) {
				t.Errorf("%s: %d %s, want %d problem", name, code, raw, c.want)
			}
		}
	})
}

// bigHandler is a callback handler on b's engine, store and tokens whose
// body cap fits a batch (setup's is 1 KiB).
func (b *bundle) bigHandler(t *testing.T) http.Handler {
	t.Helper()
	h, err := callback.NewHandler(callback.Config{Tokens: b.tokens, Engine: b.eng, Store: b.st})
	if err != nil {
		t.Fatal(err)
	}
	return h
}
