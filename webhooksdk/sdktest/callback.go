package sdktest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// Post is one POST the CallbackReceiver received.
type Post struct {
	// TaskID is the {id} path segment.
	TaskID string
	// Authorization is the request's Authorization header.
	Authorization string
	// Body is the request body.
	Body []byte
	// Status is what the receiver answered.
	Status int
}

// Result decodes an outcome post's body.
func (p Post) Result(t testing.TB) webhooksdk.Result {
	t.Helper()
	var r webhooksdk.Result
	if err := json.Unmarshal(p.Body, &r); err != nil {
		t.Fatalf("sdktest: callback body is not a Result: %v\n%s", err, p.Body)
	}
	return r
}

// CallbackReceiver fakes the dispatcher's callback endpoint: it serves
// POST /v1/tasks/{id}/outcome and POST /v1/tasks/{id}/heartbeat on an httptest.Server,
// answers 401 to a wrong bearer token and otherwise the scripted statuses (200 by
// default), and records every post.
type CallbackReceiver struct {
	// Server is the running test server; it is closed when the test ends.
	Server *httptest.Server
	// Token is the bearer token the receiver accepts.
	Token string

	mu              sync.Mutex
	changed         chan struct{} // closed and replaced on every post
	outcomes        []Post
	heartbeats      []Post
	outcomeScript   []int
	heartbeatStatus int
}

// NewCallbackReceiver starts a CallbackReceiver for the test.
func NewCallbackReceiver(t testing.TB) *CallbackReceiver {
	t.Helper()
	c := &CallbackReceiver{Token: "cb-" + NewMessageID(), changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tasks/{id}/outcome", func(w http.ResponseWriter, r *http.Request) {
		c.serve(w, r, true)
	})
	mux.HandleFunc("POST /v1/tasks/{id}/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		c.serve(w, r, false)
	})
	c.Server = httptest.NewServer(mux)
	t.Cleanup(c.Server.Close)
	return c
}

// Callback returns the envelope callback for taskID: this receiver's outcome URL and
// token.
func (c *CallbackReceiver) Callback(taskID string) *webhooksdk.Callback {
	return &webhooksdk.Callback{URL: c.Server.URL + "/v1/tasks/" + taskID + "/outcome", Token: c.Token}
}

// RespondOutcome scripts the statuses of the next outcome posts, in order; once they are
// used up the receiver answers 200.
func (c *CallbackReceiver) RespondOutcome(statuses ...int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outcomeScript = append(c.outcomeScript, statuses...)
}

// RespondHeartbeat sets the status of every later heartbeat (0 restores 200).
func (c *CallbackReceiver) RespondHeartbeat(status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heartbeatStatus = status
}

// Outcomes returns the outcome posts received so far.
func (c *CallbackReceiver) Outcomes() []Post {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Post(nil), c.outcomes...)
}

// Heartbeats returns the heartbeat posts received so far.
func (c *CallbackReceiver) Heartbeats() []Post {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Post(nil), c.heartbeats...)
}

// WaitOutcomes waits until at least n outcome posts arrived and returns them; it fails
// the test after timeout.
func (c *CallbackReceiver) WaitOutcomes(t testing.TB, n int, timeout time.Duration) []Post {
	t.Helper()
	c.wait(t, timeout, "outcome posts", n, func() int { return len(c.outcomes) })
	return c.Outcomes()
}

// WaitHeartbeats waits until at least n heartbeat posts arrived and returns them; it
// fails the test after timeout.
func (c *CallbackReceiver) WaitHeartbeats(t testing.TB, n int, timeout time.Duration) []Post {
	t.Helper()
	c.wait(t, timeout, "heartbeat posts", n, func() int { return len(c.heartbeats) })
	return c.Heartbeats()
}

func (c *CallbackReceiver) wait(t testing.TB, timeout time.Duration, what string, n int, count func() int) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		got, ch := count(), c.changed
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("sdktest: waited %s for %d %s, got %d", timeout, n, what, got)
		case <-t.Context().Done():
			t.Fatalf("sdktest: test ended while waiting for %d %s, got %d", n, what, got)
		}
	}
}

func (c *CallbackReceiver) serve(w http.ResponseWriter, r *http.Request, outcome bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, webhooksdk.MaxBodyDefault))
	status := http.StatusOK
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		status = http.StatusRequestEntityTooLarge
	case r.Header.Get("Authorization") != "Bearer "+c.Token:
		status = http.StatusUnauthorized
	case outcome && len(c.outcomeScript) > 0:
		status, c.outcomeScript = c.outcomeScript[0], c.outcomeScript[1:]
	case !outcome && c.heartbeatStatus != 0:
		status = c.heartbeatStatus
	}
	p := Post{TaskID: r.PathValue("id"), Authorization: r.Header.Get("Authorization"), Body: body, Status: status}
	if outcome {
		c.outcomes = append(c.outcomes, p)
	} else {
		c.heartbeats = append(c.heartbeats, p)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	w.WriteHeader(status)
}
