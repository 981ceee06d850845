package dispatch_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/protocol"
	"github.com/convergeplane/converge/webhooksdk"
)

// schemaCheck validates messages against protocol/schema, recording how many of each
// it saw and failing the test on an invalid one.
type schemaCheck struct {
	t       *testing.T
	schemas *protocol.Schemas
	mu      sync.Mutex
	seen    map[string]int
}

func newSchemaCheck(t *testing.T) *schemaCheck {
	s, err := protocol.LoadSchemas()
	must(t, err)
	return &schemaCheck{t: t, schemas: s, seen: map[string]int{}}
}

func (c *schemaCheck) validate(what, schema string, body []byte) {
	if schema == "" {
		c.t.Errorf("%s: no schema for %s", what, body)
		return
	}
	if err := c.schemas.Validate(schema, body); err != nil {
		c.t.Errorf("%s: %v\n%s", what, err, body)
	}
	c.mu.Lock()
	c.seen[schema]++
	c.mu.Unlock()
}

// requests wraps the provider's handler: every request the dispatcher sends it (tasks,
// batches, probes) must validate.
func (c *schemaCheck) requests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		schema, _ := protocol.DeliverySchemas(body)
		c.validate("the dispatcher's request", schema, body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// RoundTrip sends the provider's calls to the dispatcher (callbacks, heartbeats,
// payload fetches) and validates the dispatcher's answers: a 200 against the call's
// answer schema, a refusal against the problem schema.
func (c *schemaCheck) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	_, answer := protocol.CallSchemas(r.Method, r.URL.String())
	switch {
	case resp.StatusCode == http.StatusOK:
		c.validate("the dispatcher's answer to "+r.Method+" "+r.URL.Path, answer, body)
	case resp.StatusCode >= http.StatusBadRequest:
		c.validate("the dispatcher's refusal of "+r.Method+" "+r.URL.Path, protocol.SchemaProblem, body)
	}
	return resp, nil
}

// TestDispatcherMessagesMatchSchemas runs the real dispatcher against the Go SDK and
// validates every message between them against protocol/schema: the task envelopes
// (thin, since the endpoint takes small requests), alone or in batches, and the health
// probes the dispatcher sends, and its answers to payload fetches, heartbeats and callbacks.
func TestDispatcherMessagesMatchSchemas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	check := newSchemaCheck(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}, maxBatch: 4, health: true, healthy: 1, maxRequest: 64})
	var beats atomic.Int32
	beat := make(chan struct{})
	var once sync.Once
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := check.RoundTrip(r)
		if err == nil && strings.HasSuffix(r.URL.Path, "/heartbeat") && resp.StatusCode == http.StatusOK && beats.Add(1) > 0 {
			once.Do(func() { close(beat) })
		}
		return resp, err
	})}
	h, err := webhooksdk.Handler([]webhooksdk.Provider{newProvider("leaf", func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		if req.Resource.Name == "slow" {
			// Answered 202 (the sync budget is 0); finishes once a heartbeat was answered.
			select {
			case <-beat:
			case <-ctx.Done():
				return webhooksdk.Outcome{}, ctx.Err()
			}
		}
		return echo(ctx, req)
	})}, webhooksdk.WithSecrets(s.secret), webhooksdk.WithLogger(e.log), webhooksdk.WithHTTPClient(client),
		webhooksdk.WithSyncBudget(0), webhooksdk.WithHeartbeatEvery(20*time.Millisecond))
	must(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
	})
	s.set(check.requests(h))
	for _, n := range []string{"slow", "a", "b", "c", "d", "e"} {
		e.apply("leaf", n, map[string]any{"n": n})
	}
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.waitReady("leaf", 6, 30*time.Second)

	check.mu.Lock()
	defer check.mu.Unlock()
	if check.seen[protocol.SchemaEnvelope]+check.seen[protocol.SchemaBatchRequest] == 0 {
		t.Errorf("no task was delivered: %v", check.seen)
	}
	for _, schema := range []string{protocol.SchemaHealthRequest, protocol.SchemaPayload,
		protocol.SchemaHeartbeatAnswer, protocol.SchemaCallbackBatchAnswer} {
		if check.seen[schema] == 0 {
			t.Errorf("no %s message was seen: %v", schema, check.seen)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestMalformedResultsClassified: an inline 200 whose body fails result.json is refused
// as docs/protocol.md §6 says: a transient failure, recorded malformed, never applied;
// the task converges on its next claim.
func TestMalformedResultsClassified(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	check := newSchemaCheck(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	bad := map[string]func(webhooksdk.Envelope) string{
		"neither": func(env webhooksdk.Envelope) string {
			return fmt.Sprintf(`{"task_id":%q,"claim_epoch":%d}`, env.TaskID, env.ClaimEpoch)
		},
		"both": func(env webhooksdk.Envelope) string {
			return fmt.Sprintf(`{"task_id":%q,"outcome":{},"error":{"message":"m"}}`, env.TaskID)
		},
		"nulls":       func(webhooksdk.Envelope) string { return `{"outcome":null,"error":null}` },
		"epoch-zero":  func(webhooksdk.Envelope) string { return `{"claim_epoch":0,"outcome":{}}` },
		"not-object":  func(webhooksdk.Envelope) string { return `["outcome"]` },
		"outcome-str": func(webhooksdk.Envelope) string { return `{"outcome":"done"}` },
	}
	s.set(verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		w.Header().Set("Content-Type", "application/json")
		if env.Attempt > 1 {
			_, _ = w.Write(resultBody(env, `{"from":"retry"}`))
			return
		}
		body := bad[env.Resource.Name](env)
		if err := check.schemas.Validate(protocol.SchemaResult, []byte(body)); err == nil {
			t.Errorf("%s: %s validates against result.json", env.Resource.Name, body)
		}
		_, _ = io.WriteString(w, body)
	}))
	ids := map[string]string{}
	for n := range bad {
		ids[n] = e.apply("leaf", n, map[string]any{"n": n})
	}
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.waitReady("leaf", len(bad), 30*time.Second)
	for name, id := range ids {
		var from string
		must(t, e.db.Pool.QueryRow(e.ctx, `SELECT coalesce(status->>'from', '') FROM resources WHERE id = $1`, id).Scan(&from))
		if from != "retry" {
			t.Errorf("%s: status from %q, want the retry's", name, from)
		}
		waitFor(t, 5*time.Second, name+": one malformed delivery recorded", func() bool {
			return e.count(`SELECT count(*) FROM endpoint_deliveries WHERE resource_id = $1 AND classification = 'malformed'`, id) == 1
		})
	}
	e.checkNoDoubleApply()
}

// TestMalformedCallbacksRefused: a callback whose body fails result.json is refused as
// docs/protocol.md §8 says: 400 with a problem, nothing applied, and the same claim's
// valid Result is applied after it.
func TestMalformedCallbacksRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	check := newSchemaCheck(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	bad := []string{
		`{"claim_epoch":0,"outcome":{}}`,
		`{"outcome":{},"error":{"message":"m"}}`,
		`{"outcome":null,"error":null}`,
		`{"outcome":"done"}`,
		`not json`,
	}
	post := func(env webhooksdk.Envelope, body string) (int, []byte) {
		req, err := http.NewRequest(http.MethodPost, env.Callback.URL, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0, nil
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+env.Callback.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	var posting sync.WaitGroup // the callbacks, all checked before the test ends
	s.set(verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		w.WriteHeader(http.StatusAccepted)
		posting.Go(func() {
			for _, body := range bad {
				if err := check.schemas.Validate(protocol.SchemaResult, []byte(body)); err == nil {
					t.Errorf("%s validates against result.json", body)
				}
				st, answer := post(env, body)
				if st != http.StatusBadRequest {
					t.Errorf("callback %s answered %d %s, want 400", body, st, answer)
				}
				check.validate("the callback refusal", protocol.SchemaProblem, answer)
			}
			st, answer := post(env, string(resultBody(env, `{"from":"callback"}`)))
			if st != http.StatusOK {
				t.Errorf("the valid callback answered %d %s", st, answer)
			}
			check.validate("the callback answer", protocol.SchemaCallbackAnswer, answer)
		})
	}))
	id := e.apply("leaf", "one", map[string]any{"n": 1})
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.waitReady("leaf", 1, 30*time.Second)
	posting.Wait()
	var from string
	must(t, e.db.Pool.QueryRow(e.ctx, `SELECT coalesce(status->>'from', '') FROM resources WHERE id = $1`, id).Scan(&from))
	if from != "callback" {
		t.Errorf("status from %q, want the valid callback's", from)
	}
	e.checkNoDoubleApply()
}
