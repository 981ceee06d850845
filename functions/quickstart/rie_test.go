package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/convergeplane/converge/dispatch/transport/lambdatest"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/lambda"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestUnderEmulator runs this function's bootstrap, built as for Lambda, under the real
// runtime emulator and invokes it the way the dispatcher does: a signed converge.v1
// event POSTed to the Invoke API.
func TestUnderEmulator(t *testing.T) {
	addr := lambdatest.StartEmulator(t, lambdatest.Emulator(t), lambdatest.BuildBootstrap(t, "."), "PROVIDER_SECRETS="+secret)

	t.Run("leaf result", func(t *testing.T) {
		env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "bucket", Version: 1})
		env.Resource.Spec = json.RawMessage(`{"region":"eu-west-1"}`)
		res := lambdatest.ResultOf(t, lambdatest.InvokeEmulator(t, addr, signedEvent(t, secret, env, nil)))
		if res.Outcome == nil || string(res.Outcome.Status) != `{"bucket_id":"bkt-r1","region":"eu-west-1"}` {
			t.Errorf("result %+v, want the bucket's status", res)
		}
	})
	t.Run("terminal error", func(t *testing.T) {
		env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "cdn", Version: 1})
		res := lambdatest.ResultOf(t, lambdatest.InvokeEmulator(t, addr, signedEvent(t, secret, env, nil)))
		if res.Error == nil || !res.Error.Terminal || !strings.Contains(res.Error.Message, "spec.origin is empty") {
			t.Errorf("result %+v, want a terminal error", res)
		}
	})
	t.Run("bad signature", func(t *testing.T) {
		other, err := webhooksdk.GenerateSecret()
		if err != nil {
			t.Fatal(err)
		}
		env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "bucket", Version: 1})
		if resp := lambdatest.InvokeEmulator(t, addr, signedEvent(t, other, env, nil)); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("statusCode %d, want 401", resp.StatusCode)
		}
	})
	t.Run("event invocation completes through the callback", func(t *testing.T) {
		cb := sdktest.NewCallbackReceiver(t)
		env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "bucket", Version: 1})
		env.Callback = cb.Callback(env.TaskID)
		hint := map[string]string{lambda.HeaderInvocation: lambda.InvocationEvent}
		if resp := lambdatest.InvokeEmulator(t, addr, signedEvent(t, secret, env, hint)); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("statusCode %d, want 202", resp.StatusCode)
		}
		posts := cb.Outcomes()
		if len(posts) != 1 {
			t.Fatalf("%d outcome posts when the invocation returned, want 1", len(posts))
		}
		if res := posts[0].Result(t); res.Outcome == nil || res.TaskID != env.TaskID {
			t.Errorf("callback result %+v", res)
		}
	})
}

// signedEvent returns the dispatcher's converge.v1 Invoke event carrying env, signed
// with key, with extra headers.
func signedEvent(t *testing.T, key string, env webhooksdk.Envelope, extra map[string]string) []byte {
	t.Helper()
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return sdktest.InvokeEvent(t, key, body, extra)
}
