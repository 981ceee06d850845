package sdktest_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// account is a tiny leaf provider in the reference's style.
type account struct {
	configs []webhooksdk.ProviderConfig
	panics  bool
}

func (*account) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "account", Version: 1}
}

func (a *account) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	if a.panics {
		panic("boom")
	}
	var spec struct {
		Team string `json:"team_name"`
	}
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil || spec.Team == "" {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New("bad account spec"))
	}
	if _, ok := ctx.Deadline(); !ok {
		return webhooksdk.Outcome{}, errors.New("no deadline")
	}
	status, err := json.Marshal(map[string]string{"account_id": "acc-" + spec.Team})
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	return webhooksdk.Outcome{Status: status}, nil
}

func (a *account) OnConfig(cfg webhooksdk.ProviderConfig) { a.configs = append(a.configs, cfg) }

func TestRun(t *testing.T) {
	t.Parallel()
	p := &account{}
	out, err := sdktest.Run(t, p, webhooksdk.Request{
		Reaction: "work",
		Resource: webhooksdk.Resource{Kind: "account", KindVersion: 1, Name: "a", Spec: json.RawMessage(`{"team_name":"blue"}`)},
		Deadline: time.Now().Add(time.Minute),
		Config:   json.RawMessage(`{"endpoint":"x"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Status) != `{"account_id":"acc-blue"}` {
		t.Errorf("status = %s", out.Status)
	}
	if len(p.configs) != 1 || string(p.configs[0].Spec) != `{"endpoint":"x"}` {
		t.Errorf("OnConfig got %+v", p.configs)
	}

	_, err = sdktest.Run(t, &account{}, webhooksdk.Request{Resource: webhooksdk.Resource{Spec: json.RawMessage(`{}`)}})
	if !webhooksdk.IsTerminal(err) {
		t.Errorf("bad spec: err = %v, want terminal", err)
	}
	_, err = sdktest.Run(t, &account{panics: true}, webhooksdk.Request{})
	if err == nil || !strings.Contains(err.Error(), "panicked: boom") {
		t.Errorf("panic: err = %v", err)
	}
}

// TestRunWithoutOnConfig: a provider without OnConfig runs, and reads its config from
// the request.
func TestRunWithoutOnConfig(t *testing.T) {
	t.Parallel()
	p := webhooksdk.WorkFunc("echo", 1, func(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		return webhooksdk.Outcome{Status: req.Config}, nil
	})
	out, err := sdktest.Run(t, p, webhooksdk.Request{Config: json.RawMessage(`{"endpoint":"x"}`)})
	if err != nil || string(out.Status) != `{"endpoint":"x"}` {
		t.Errorf("Run = %s, %v; want the config echoed", out.Status, err)
	}
}

func TestNewTaskRequest(t *testing.T) {
	t.Parallel()
	h, err := webhooksdk.Handler([]webhooksdk.Provider{&account{}}, webhooksdk.WithSecrets(secret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Shutdown(context.WithoutCancel(t.Context())); err != nil {
			t.Error(err)
		}
	})

	env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "account", Version: 1})
	env.Resource.Spec = json.RawMessage(`{"team_name":"red"}`)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, sdktest.NewTaskRequest(t, secret, env))
	if rec.Code != http.StatusOK {
		t.Fatalf("task: %d %s", rec.Code, rec.Body)
	}
	if want := `{"task_id":"task-1","claim_epoch":1,"outcome":{"status":{"account_id":"acc-red"}}}`; rec.Body.String() != want {
		t.Fatalf("task body = %s, want %s", rec.Body, want)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, sdktest.NewHealthRequest(t, secret))
	if want := `{"kinds":[{"kind":"account","kind_version":1,"ready":true}]}`; rec.Code != http.StatusOK || rec.Body.String() != want {
		t.Fatalf("health: %d %s, want 200 %s", rec.Code, rec.Body, want)
	}
}

func TestCallbackReceiver(t *testing.T) {
	t.Parallel()
	cb := sdktest.NewCallbackReceiver(t)
	cb.RespondOutcome(http.StatusServiceUnavailable)
	c := cb.Callback("t1")
	post := func(url, token string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(`{"task_id":"t1","claim_epoch":1,"outcome":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := cb.Server.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(c.URL, c.Token); got != http.StatusServiceUnavailable {
		t.Errorf("scripted: %d", got)
	}
	if got := post(c.URL, c.Token); got != http.StatusOK {
		t.Errorf("after script: %d", got)
	}
	if got := post(c.URL, "wrong"); got != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", got)
	}
	hb, err := webhooksdk.HeartbeatURL(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := post(hb, c.Token); got != http.StatusOK {
		t.Errorf("heartbeat: %d", got)
	}
	posts := cb.WaitOutcomes(t, 3, time.Second)
	if posts[1].Result(t).Outcome == nil || posts[0].TaskID != "t1" {
		t.Errorf("posts = %+v", posts)
	}
	if n := len(cb.WaitHeartbeats(t, 1, time.Second)); n != 1 {
		t.Errorf("heartbeats = %d", n)
	}
}
