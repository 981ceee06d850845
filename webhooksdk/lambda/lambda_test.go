package lambda_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	awslambda "github.com/aws/aws-lambda-go/lambda"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/lambda"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var kvDisk = webhooksdk.KindVersion{Kind: "disk", Version: 1}

// disk is a provider whose Work fails terminally on reaction "break", sleeps on
// "slow", and otherwise reports a size.
type disk struct{}

func (disk) Kind() webhooksdk.KindVersion { return kvDisk }

func (disk) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	switch req.Reaction {
	case "break":
		return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New("disk cannot shrink"))
	case "slow":
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return webhooksdk.Outcome{}, ctx.Err()
		}
	}
	return webhooksdk.Outcome{Status: json.RawMessage(`{"size_gb":10}`)}, nil
}

// newHandler returns the adapter as aws-lambda-go's runtime would invoke it.
func newHandler(t *testing.T, opts ...webhooksdk.Option) awslambda.Handler {
	t.Helper()
	base := []webhooksdk.Option{
		webhooksdk.WithSecrets(secret),
		webhooksdk.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))),
		webhooksdk.WithSyncBudget(0), // a Lambda answers inline regardless
	}
	h, err := lambda.New([]webhooksdk.Provider{disk{}}, append(base, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return awslambda.NewHandler(h.Serve)
}

func envelope(t *testing.T, reaction string, cb *webhooksdk.Callback) []byte {
	t.Helper()
	env := sdktest.TaskEnvelope(kvDisk)
	env.Reaction = reaction
	env.Callback = cb
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// invoke runs payload through h and decodes the HTTP response object it returns.
func invoke(t *testing.T, h awslambda.Handler, payload []byte) events.LambdaFunctionURLResponse {
	t.Helper()
	out, err := h.Invoke(t.Context(), payload)
	if err != nil {
		t.Fatalf("Invoke: %v", err)
	}
	t.Logf("answer: %s", out)
	var resp events.LambdaFunctionURLResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("answer is not an HTTP response object: %v", err)
	}
	return resp
}

func result(t *testing.T, resp events.LambdaFunctionURLResponse) webhooksdk.Result {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("statusCode %d, want 200: %s", resp.StatusCode, resp.Body)
	}
	if ct := resp.Headers["Content-Type"]; ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var res webhooksdk.Result
	if err := json.Unmarshal([]byte(resp.Body), &res); err != nil {
		t.Fatalf("body is not a Result: %v", err)
	}
	return res
}

func TestInvokeSync(t *testing.T) {
	t.Parallel()
	h := newHandler(t)
	cb := sdktest.NewCallbackReceiver(t)

	t.Run("result inline past the sync budget", func(t *testing.T) {
		res := result(t, invoke(t, h, sdktest.InvokeEvent(t, secret, envelope(t, "slow", cb.Callback("task-1")), nil)))
		if res.Outcome == nil || string(res.Outcome.Status) != `{"size_gb":10}` {
			t.Errorf("result %+v, want the outcome", res)
		}
		if n := len(cb.Outcomes()); n != 0 {
			t.Errorf("%d callback posts, want none", n)
		}
	})
	t.Run("terminal error", func(t *testing.T) {
		res := result(t, invoke(t, h, sdktest.InvokeEvent(t, secret, envelope(t, "break", nil), nil)))
		if res.Error == nil || !res.Error.Terminal || res.Error.Message != "disk cannot shrink" {
			t.Errorf("result %+v, want a terminal error", res)
		}
	})
	t.Run("bad signature", func(t *testing.T) {
		other, err := webhooksdk.GenerateSecret()
		if err != nil {
			t.Fatal(err)
		}
		resp := invoke(t, h, sdktest.InvokeEvent(t, other, envelope(t, "work", nil), nil))
		if resp.StatusCode != http.StatusUnauthorized || resp.Headers["Content-Type"] != "application/problem+json" {
			t.Errorf("got %d %v, want a 401 problem", resp.StatusCode, resp.Headers)
		}
	})
	t.Run("health probe", func(t *testing.T) {
		resp := invoke(t, h, sdktest.InvokeEvent(t, secret, []byte(`{"type":"health"}`), nil))
		var health webhooksdk.HealthResponse
		if err := json.Unmarshal([]byte(resp.Body), &health); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("got %d %s, want a health response", resp.StatusCode, resp.Body)
		}
		if want := (webhooksdk.KindReadiness{Kind: "disk", KindVersion: 1, Ready: true}); len(health.Kinds) != 1 || health.Kinds[0] != want {
			t.Errorf("kinds %+v, want [%+v]", health.Kinds, want)
		}
	})
}

// hooked has both optional hooks: Ready reports ready, and OnConfig records each config.
type hooked struct {
	ready   atomic.Bool
	configs atomic.Value // string: the last config's spec
}

func (*hooked) Kind() webhooksdk.KindVersion             { return kvDisk }
func (h *hooked) Ready() bool                            { return h.ready.Load() }
func (h *hooked) OnConfig(cfg webhooksdk.ProviderConfig) { h.configs.Store(string(cfg.Spec)) }
func (*hooked) Work(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
	return webhooksdk.Outcome{}, nil
}

// TestInvokeOptionalHooks: a provider's Ready and OnConfig are called behind the
// Lambda adapter as behind the HTTP Handler (the disk provider, which has neither, is
// ready in TestInvokeSync).
func TestInvokeOptionalHooks(t *testing.T) {
	t.Parallel()
	p := &hooked{}
	l, err := lambda.New([]webhooksdk.Provider{p}, webhooksdk.WithSecrets(secret),
		webhooksdk.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	if err != nil {
		t.Fatal(err)
	}
	h := awslambda.NewHandler(l.Serve)
	resp := invoke(t, h, sdktest.InvokeEvent(t, secret, []byte(`{"type":"health"}`), nil))
	if want := `{"kinds":[{"kind":"disk","kind_version":1,"ready":false}]}`; resp.Body != want {
		t.Errorf("health while unready: %s, want %s", resp.Body, want)
	}
	task := func() events.LambdaFunctionURLResponse {
		env := sdktest.TaskEnvelope(kvDisk)
		env.Config = json.RawMessage(`{"zone":"a"}`)
		body, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		return invoke(t, h, sdktest.InvokeEvent(t, secret, body, nil))
	}
	if resp := task(); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("task while unready: %d %s, want 503", resp.StatusCode, resp.Body)
	}
	p.ready.Store(true)
	if resp := task(); resp.StatusCode != http.StatusOK {
		t.Errorf("task once ready: %d %s, want 200", resp.StatusCode, resp.Body)
	}
	if got, _ := p.configs.Load().(string); got != `{"zone":"a"}` {
		t.Errorf("OnConfig got %q, want the task's config", got)
	}
}

func TestInvokeEvent(t *testing.T) {
	t.Parallel()
	h := newHandler(t, webhooksdk.WithHeartbeatEvery(20*time.Millisecond))
	cb := sdktest.NewCallbackReceiver(t)
	hint := map[string]string{lambda.HeaderInvocation: lambda.InvocationEvent}

	t.Run("result through the callback before returning", func(t *testing.T) {
		resp := invoke(t, h, sdktest.InvokeEvent(t, secret, envelope(t, "slow", cb.Callback("task-1")), hint))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("statusCode %d, want 202", resp.StatusCode)
		}
		// No waiting: a frozen Lambda would never send it later.
		posts := cb.Outcomes()
		if len(posts) != 1 {
			t.Fatalf("%d outcome posts on return, want 1", len(posts))
		}
		if res := posts[0].Result(t); res.Outcome == nil || res.TaskID != "task-1" {
			t.Errorf("callback result %+v", res)
		}
		if posts[0].Authorization != "Bearer "+cb.Token {
			t.Errorf("callback Authorization %q", posts[0].Authorization)
		}
		if len(cb.Heartbeats()) == 0 {
			t.Error("no heartbeat while Work ran")
		}
	})
	t.Run("a refusal is a function error", func(t *testing.T) {
		other, err := webhooksdk.GenerateSecret()
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.Invoke(t.Context(), sdktest.InvokeEvent(t, other, envelope(t, "work", cb.Callback("task-1")), hint))
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("Invoke error %v, want the 401 refusal", err)
		}
	})
}

func TestFunctionURL(t *testing.T) {
	t.Parallel()
	h := newHandler(t)
	body := envelope(t, "work", nil)
	s, err := webhooksdk.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{}
	s.SetHeaders(hdr, sdktest.NewMessageID(), time.Now(), body)
	req := events.LambdaFunctionURLRequest{
		Version: "2.0",
		RawPath: "/",
		Headers: map[string]string{
			"content-type":      "application/json",
			"webhook-id":        hdr.Get(webhooksdk.HeaderID),
			"webhook-timestamp": hdr.Get(webhooksdk.HeaderTimestamp),
			"webhook-signature": hdr.Get(webhooksdk.HeaderSignature),
		},
		RequestContext: events.LambdaFunctionURLRequestContext{
			HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{Method: http.MethodPost, Path: "/"},
		},
		Body:            base64.StdEncoding.EncodeToString(body),
		IsBase64Encoded: true,
	}
	payload, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if res := result(t, invoke(t, h, payload)); res.Outcome == nil {
		t.Errorf("result %+v, want the outcome", res)
	}

	req.RequestContext.HTTP.Method = http.MethodGet
	if payload, err = json.Marshal(req); err != nil {
		t.Fatal(err)
	}
	if resp := invoke(t, h, payload); resp.StatusCode != http.StatusMethodNotAllowed || resp.Headers["Allow"] != http.MethodPost {
		t.Errorf("GET answered %d %v, want 405 with Allow: POST", resp.StatusCode, resp.Headers)
	}
}

func TestInvokeDeadline(t *testing.T) {
	t.Parallel()
	h := newHandler(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := h.Invoke(ctx, sdktest.InvokeEvent(t, secret, envelope(t, "slow", nil), nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Invoke error %v, want the deadline", err)
	}
}

// TestInvokeBatch: a batched delivery is one invocation; a sync one answers every
// task inline (however slow), in one batch response.
func TestInvokeBatch(t *testing.T) {
	t.Parallel()
	h := newHandler(t)
	var batch webhooksdk.Batch
	batch.Type = webhooksdk.EnvelopeBatch
	for i, reaction := range []string{"slow", "break", "work"} {
		env := sdktest.TaskEnvelope(kvDisk)
		env.TaskID, env.Reaction = reaction, reaction
		env.ClaimEpoch = int64(i + 1)
		batch.Tasks = append(batch.Tasks, env)
	}
	body, err := json.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	resp := invoke(t, h, sdktest.InvokeEvent(t, secret, body, nil))
	var br webhooksdk.BatchResponse
	if err := json.Unmarshal([]byte(resp.Body), &br); err != nil || resp.StatusCode != http.StatusOK || br.Type != webhooksdk.EnvelopeBatch {
		t.Fatalf("got %d %s, want a batch response", resp.StatusCode, resp.Body)
	}
	got := map[string]webhooksdk.BatchResult{}
	for _, raw := range br.Results {
		var r webhooksdk.BatchResult
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		got[r.TaskID] = r
	}
	if r := got["slow"]; r.Outcome == nil || r.Accepted || r.ClaimEpoch != 1 {
		t.Errorf("slow: %+v, want its outcome inline", r)
	}
	if r := got["break"]; r.Error == nil || !r.Error.Terminal || r.ClaimEpoch != 2 {
		t.Errorf("break: %+v, want a terminal error", r)
	}
	if r := got["work"]; r.Outcome == nil || r.ClaimEpoch != 3 {
		t.Errorf("work: %+v, want its outcome", r)
	}
}
