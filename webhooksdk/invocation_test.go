package webhooksdk_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// invoke serves env, signed under msgID (a fresh one if empty), through
// ServeInvocation and returns the recorded answer.
func (b *testBundle) invoke(t *testing.T, inv webhooksdk.Invocation, msgID string, env webhooksdk.Envelope) *httptest.ResponseRecorder {
	t.Helper()
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	b.ep.ServeInvocation(w, sdktest.NewSignedRequest(t, "/", vectorSecret, msgID, time.Time{}, body), inv)
	t.Logf("answer %d: %s", w.Code, w.Body)
	return w
}

func TestServeInvocationSync(t *testing.T) {
	t.Parallel()
	slow := func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
		time.Sleep(50 * time.Millisecond)
		return webhooksdk.Outcome{SideEffectDone: true}, nil
	}
	// A zero sync budget would answer 202 over HTTP; a sync invocation waits anyway,
	// since nothing may run after it returns.
	b := setup(t, slow, webhooksdk.WithSyncBudget(0))
	w := b.invoke(t, webhooksdk.InvocationSync, "", b.envelope(true))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200", w.Code)
	}
	if res := decodeResult(t, w.Body.Bytes()); res.Outcome == nil || !res.Outcome.SideEffectDone {
		t.Errorf("result %+v, want the outcome inline", res)
	}
	shutdown(t, b)
	if n := len(b.cb.Outcomes()); n != 0 {
		t.Errorf("%d callback posts, want none: the answer carried the result", n)
	}
}

func TestServeInvocationEvent(t *testing.T) {
	t.Parallel()

	t.Run("fast work still goes to the callback", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		w := b.invoke(t, webhooksdk.InvocationEvent, "", b.envelope(true))
		if w.Code != http.StatusAccepted {
			t.Fatalf("status %d, want 202", w.Code)
		}
		// No wait: the outcome must have been delivered before ServeInvocation returned.
		posts := b.cb.Outcomes()
		if len(posts) != 1 {
			t.Fatalf("%d outcome posts on return, want 1", len(posts))
		}
		if res := posts[0].Result(t); res.Outcome == nil || res.TaskID != "task-1" {
			t.Errorf("callback result %+v", res)
		}
	})

	t.Run("heartbeats while work runs", func(t *testing.T) {
		t.Parallel()
		slow := func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			time.Sleep(200 * time.Millisecond)
			return webhooksdk.Outcome{}, nil
		}
		b := setup(t, slow, webhooksdk.WithHeartbeatEvery(20*time.Millisecond))
		if w := b.invoke(t, webhooksdk.InvocationEvent, "", b.envelope(true)); w.Code != http.StatusAccepted {
			t.Fatalf("status %d, want 202", w.Code)
		}
		if n := len(b.cb.Outcomes()); n != 1 {
			t.Errorf("%d outcome posts on return, want 1", n)
		}
		if n := len(b.cb.Heartbeats()); n == 0 {
			t.Error("no heartbeat while Work ran")
		}
	})

	t.Run("a repeated delivery posts the result again", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		env := b.envelope(true)
		id := sdktest.NewMessageID()
		for range 2 {
			if w := b.invoke(t, webhooksdk.InvocationEvent, id, env); w.Code != http.StatusAccepted {
				t.Fatalf("status %d, want 202", w.Code)
			}
		}
		if n := b.prov.calls.Load(); n != 1 {
			t.Errorf("Work ran %d times, want 1", n)
		}
		posts := b.cb.Outcomes()
		if len(posts) != 2 || string(posts[0].Body) != string(posts[1].Body) {
			t.Errorf("outcome posts %v, want the same result twice", posts)
		}
	})

	t.Run("a repeat while the run is in flight waits for its callback", func(t *testing.T) {
		t.Parallel()
		g := newGate(t)
		b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			return webhooksdk.Outcome{}, g.wait(ctx)
		})
		env := b.envelope(true)
		id := sdktest.NewMessageID()
		first := make(chan int)
		go func() { first <- b.invoke(t, webhooksdk.InvocationSync, id, env).Code }()
		g.waitEntered(t)
		time.AfterFunc(50*time.Millisecond, g.Open)
		if w := b.invoke(t, webhooksdk.InvocationEvent, id, env); w.Code != http.StatusAccepted {
			t.Fatalf("repeat answered %d, want 202", w.Code)
		}
		if n := len(b.cb.Outcomes()); n != 1 {
			t.Errorf("%d outcome posts when the repeat returned, want 1", n)
		}
		if code := <-first; code != http.StatusOK {
			t.Errorf("first answered %d, want 200", code)
		}
		if n := b.prov.calls.Load(); n != 1 {
			t.Errorf("Work ran %d times, want 1", n)
		}
	})

	t.Run("no callback is refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		if w := b.invoke(t, webhooksdk.InvocationEvent, "", b.envelope(false)); w.Code != http.StatusBadRequest {
			t.Fatalf("status %d, want 400", w.Code)
		}
		if n := b.prov.calls.Load(); n != 0 {
			t.Errorf("Work ran %d times, want 0", n)
		}
	})
}
