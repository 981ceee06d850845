package peers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/convergeplane/converge/bench/peers"
	"github.com/convergeplane/converge/internal/testkit/workload"
	"github.com/convergeplane/converge/webhooksdk"
)

// River's HTTP worker sends what the engine's dispatcher sends: the leaf's
// envelope, signed so that webhooksdk's verifier accepts it.
func TestHookWorkerSendsASignedEnvelope(t *testing.T) {
	t.Parallel()
	secret, err := webhooksdk.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	key, err := webhooksdk.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	var got webhooksdk.Envelope
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhooksdk.Verify([]webhooksdk.Secret{key}, r.Header, body, time.Now(), 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if err := json.Unmarshal(body, &got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(webhooksdk.Result{TaskID: got.TaskID, ClaimEpoch: got.ClaimEpoch,
			Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{}`)}})
	}))
	defer srv.Close()
	wk, err := peers.NewHookWorker(srv.URL, secret, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	job := &river.Job[peers.HookArgs]{JobRow: &rivertype.JobRow{ID: 7, Attempt: 1}, Args: peers.HookArgs{I: 3}}
	if err := wk.Work(t.Context(), job); err != nil {
		t.Fatalf("Work: %v", err)
	}
	if want := workload.Envelope(3); got.TaskID != want.TaskID || got.Resource == nil || got.Resource.Name != want.Resource.Name {
		t.Errorf("envelope %+v, want leaf 3's", got)
	}
	// A provider that does not know the secret refuses the request, and the
	// job fails.
	other, err := webhooksdk.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	wk, err = peers.NewHookWorker(srv.URL, other, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Work(t.Context(), job); err == nil {
		t.Error("Work succeeded with a request signed by another secret")
	}
}
