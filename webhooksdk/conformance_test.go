package webhooksdk_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/convergeplane/converge/protocol"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/lambda"
)

// TestConformance runs every conformance vector of protocol/vectors (the format is
// protocol/vectors/README.md) against this SDK: the HTTP Handler or the Lambda adapter,
// its clock and its outgoing HTTP client injected, the handler behaving as the case
// says, the control plane's answers scripted. It is the reference runner the other
// SDKs' runners follow. Beyond what a vector states, every answer and every outgoing
// body the SDK really produced must validate against its schema in protocol/schema.
func TestConformance(t *testing.T) {
	vs, err := protocol.Vectors()
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := protocol.LoadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatal("no conformance vectors")
	}
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			runVector(t, schemas, v)
		})
	}
}

func runVector(t *testing.T, schemas *protocol.Schemas, v protocol.Vector) {
	cp := &controlPlane{t: t, schemas: schemas, calls: v.Outgoing}
	answered := make(chan struct{}) // closed once the SDK answered the request
	var mu sync.Mutex
	ran := map[string]string{} // task_id → how its handler ended
	work := func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		b, ok := v.Handlers[req.TaskID]
		if !ok {
			t.Errorf("the handler was called for task %q, which must not reach it", req.TaskID)
			return webhooksdk.Outcome{}, errors.New("unexpected task")
		}
		checkSees(t, req, b.Sees)
		end := "returned"
		switch b.Wait {
		case protocol.WaitAnswered:
			<-answered
		case protocol.WaitCancelled:
			select {
			case <-ctx.Done():
				end = "cancelled"
			case <-time.After(30 * time.Second):
				end = "never cancelled"
			}
		}
		mu.Lock()
		ran[req.TaskID] += end
		mu.Unlock()
		if end != "returned" {
			return webhooksdk.Outcome{}, errors.New("cancelled")
		}
		if b.Error != nil {
			err := errors.New(b.Error.Message)
			if b.Error.Terminal {
				err = webhooksdk.Terminal(err)
			}
			return webhooksdk.Outcome{}, err
		}
		var out webhooksdk.Outcome
		if err := json.Unmarshal(b.Outcome, &out); err != nil {
			t.Errorf("vector outcome: %v", err)
		}
		return out, nil
	}
	var providers []webhooksdk.Provider
	for _, p := range v.Setup.Providers {
		providers = append(providers, vectorProvider{Provider: webhooksdk.WorkFunc(p.Kind, p.KindVersion, work), ready: p.Ready})
	}
	cbMax := 1 // each Result to its own callback.url
	if v.Setup.CallbackBatch {
		cbMax = webhooksdk.CallbackBatchMaxDefault
	}
	opts := []webhooksdk.Option{
		webhooksdk.WithSecrets(v.Setup.Secrets...),
		webhooksdk.WithClock(func() time.Time { return time.Unix(v.Setup.Now, 0) }),
		webhooksdk.WithTolerance(time.Duration(v.Setup.ToleranceSeconds) * time.Second),
		webhooksdk.WithSyncBudget(time.Duration(v.Setup.SyncBudgetMS) * time.Millisecond),
		webhooksdk.WithHeartbeatEvery(time.Duration(v.Setup.HeartbeatEveryMS) * time.Millisecond),
		webhooksdk.WithHTTPClient(&http.Client{Transport: cp}),
		webhooksdk.WithCallbackRetry(time.Millisecond, 10*time.Millisecond, time.Minute),
		webhooksdk.WithCallbackBatch(webhooksdk.CallbackBatchWindowDefault, cbMax),
		webhooksdk.WithLogger(slog.New(slog.DiscardHandler)),
	}

	var got answer
	delivered := []byte(deref(v.Request.Body)) // the delivery's body, for its answer's schema
	switch v.Setup.Transport {
	case protocol.TransportHTTP:
		ep, err := webhooksdk.Handler(providers, opts...)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(v.Request.Method, "/converge", strings.NewReader(deref(v.Request.Body)))
		for k, val := range v.Request.Headers {
			req.Header.Set(k, val)
		}
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, req)
		close(answered)
		got = answer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := ep.Shutdown(ctx); err != nil {
			t.Errorf("the SDK did not finish its work: %v", err)
		}
	case protocol.TransportLambda:
		h, err := lambda.New(providers, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var ev events.LambdaFunctionURLRequest
		if err := json.Unmarshal(v.Request.Event, &ev); err != nil {
			t.Fatal(err)
		}
		delivered = []byte(ev.Body)
		if ev.IsBase64Encoded {
			if delivered, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := h.Serve(t.Context(), ev)
		close(answered)
		got = answer{status: resp.StatusCode, header: http.Header{}, body: []byte(resp.Body), failed: err}
		if err == nil {
			obj, merr := json.Marshal(resp)
			if merr != nil {
				t.Fatal(merr)
			}
			if verr := schemas.Validate(protocol.SchemaLambdaResponse, obj); verr != nil {
				t.Errorf("the Lambda adapter's response: %v\n%s", verr, obj)
			}
		}
		for k, val := range resp.Headers {
			got.header.Set(k, val)
		}
	default:
		t.Fatalf("unknown transport %q", v.Setup.Transport)
	}

	checkAnswer(t, v.Expect, got)
	if got.failed == nil {
		schema := protocol.SchemaProblem
		if got.status == http.StatusOK {
			_, schema = protocol.DeliverySchemas(delivered)
		}
		if got.status >= http.StatusBadRequest || got.status == http.StatusOK {
			if err := schemas.Validate(schema, got.body); err != nil {
				t.Errorf("the SDK's answer: %v\n%s", err, got.body)
			}
		}
	}
	cp.mu.Lock()
	if cp.next < len(cp.calls) {
		t.Errorf("the SDK made %d of the %d outgoing calls; next missing: %s %s", cp.next, len(cp.calls), cp.calls[cp.next].Method, cp.calls[cp.next].URL)
	}
	cp.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	for id, b := range v.Handlers {
		want := "returned"
		if b.Wait == protocol.WaitCancelled {
			want = "cancelled"
		}
		if ran[id] != want {
			t.Errorf("the handler of task %s: %q, want %q (exactly once)", id, ran[id], want)
		}
	}
}

// vectorProvider is a provider whose readiness the vector sets.
type vectorProvider struct {
	webhooksdk.Provider
	ready bool
}

func (p vectorProvider) Ready() bool { return p.ready }

type answer struct {
	status int
	header http.Header
	body   []byte
	failed error // the Lambda adapter's function error
}

func checkAnswer(t *testing.T, want protocol.Answer, got answer) {
	t.Helper()
	if want.FunctionError {
		if got.failed == nil {
			t.Errorf("the Lambda adapter answered %d %s, want a function error", got.status, got.body)
		}
		return
	}
	if got.failed != nil {
		t.Fatalf("the Lambda adapter failed: %v", got.failed)
	}
	if got.status != want.Status {
		t.Errorf("status %d (%s), want %d", got.status, got.body, want.Status)
	}
	for k, val := range want.Headers {
		if g := got.header.Get(k); !sameHeader(k, g, val) {
			t.Errorf("header %s: %q, want %q", k, g, val)
		}
	}
	for _, k := range want.HeadersPresent {
		if got.header.Get(k) == "" {
			t.Errorf("header %s missing", k)
		}
	}
	if want.Problem {
		var p struct{ Status int }
		if ct := got.header.Get("Content-Type"); !sameHeader("content-type", ct, "application/problem+json") {
			t.Errorf("content type %q, want application/problem+json", ct)
		}
		if err := json.Unmarshal(got.body, &p); err != nil || p.Status != want.Status {
			t.Errorf("problem body %s: want a JSON object with status %d", got.body, want.Status)
		}
	}
	if want.Body != nil {
		checkJSON(t, "answer body", got.body, want.Body, want.Ignore)
	}
}

// controlPlane is the SDK's HTTP client: it checks each outgoing call against the next
// one the vector lists and answers with that call's scripted answer.
type controlPlane struct {
	t       *testing.T
	schemas *protocol.Schemas
	mu      sync.Mutex
	calls   []protocol.Call
	next    int
	extra   int // calls past the listed ones, reported once
}

func (c *controlPlane) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		body = b
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next >= len(c.calls) {
		if c.extra++; c.extra == 1 {
			c.t.Errorf("unexpected outgoing call %s %s %s", r.Method, r.URL, body)
		}
		return nil, fmt.Errorf("unexpected call %s %s", r.Method, r.URL)
	}
	want := c.calls[c.next]
	c.next++
	where := fmt.Sprintf("outgoing call %d (%s %s)", c.next, want.Method, want.URL)
	if r.Method != want.Method || r.URL.String() != want.URL {
		c.t.Errorf("%s: got %s %s", where, r.Method, r.URL)
	}
	for k, val := range want.Headers {
		if g := r.Header.Get(k); !sameHeader(k, g, val) {
			c.t.Errorf("%s: header %s %q, want %q", where, k, g, val)
		}
	}
	if want.Body != nil {
		checkJSON(c.t, where+" body", body, want.Body, want.Ignore)
	}
	if schema, _ := protocol.CallSchemas(r.Method, r.URL.String()); schema != "" {
		if err := c.schemas.Validate(schema, body); err != nil {
			c.t.Errorf("%s: %v\n%s", where, err, body)
		}
	}
	h := http.Header{}
	for k, val := range want.Answer.Headers {
		h.Set(k, val)
	}
	return &http.Response{StatusCode: want.Answer.Status, Header: h, Request: r,
		Body: io.NopCloser(strings.NewReader(want.Answer.Body)), ContentLength: int64(len(want.Answer.Body))}, nil
}

// sameHeader compares a header's value with the vector's: exactly, but a content type
// by its media type alone (a charset parameter is free).
func sameHeader(name, got, want string) bool {
	if strings.EqualFold(name, "content-type") {
		mt, _, err := mime.ParseMediaType(got)
		return err == nil && mt == want
	}
	return got == want
}

// checkSees checks that the handler received the envelope fields of sees.
func checkSees(t *testing.T, req webhooksdk.Request, sees map[string]json.RawMessage) {
	fields := map[string]any{
		"task_id": req.TaskID, "claim_epoch": req.ClaimEpoch, "attempt": req.Attempt, "kind_version": req.KindVersion,
		"reaction": req.Reaction, "trigger": req.Trigger, "task_type": req.TaskType, "resource": req.Resource,
		"config": req.Config, "operation": req.Operation, "transition": req.Transition, "dedup_token": req.DedupToken,
	}
	for k, want := range sees {
		got, ok := fields[k]
		if !ok {
			t.Errorf("sees: unknown field %q", k)
			continue
		}
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		checkJSON(t, "the handler's "+k, b, want, nil)
	}
}

// checkJSON compares got with want as JSON values, members that are null left out,
// the results of a batch answer in task_id order; at each JSON Pointer of ignore got
// must have a value, which is not compared.
func checkJSON(t *testing.T, what string, got, want []byte, ignore []string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Errorf("%s: not JSON: %v: %s", what, err, got)
		return
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: the vector's JSON: %v", what, err)
	}
	g, w = normalize(g), normalize(w)
	for _, p := range ignore {
		if !drop(g, p) {
			t.Errorf("%s: no value at %s: %s", what, p, got)
		}
		drop(w, p)
	}
	if !reflect.DeepEqual(g, w) {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		t.Errorf("%s:\n got %s\nwant %s", what, gb, wb)
	}
}

// normalize removes null members and sorts a batch answer's results by task_id.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, m := range x {
			if m == nil {
				delete(x, k)
				continue
			}
			x[k] = normalize(m)
		}
		if rs, ok := x["results"].([]any); ok && x["type"] == webhooksdk.EnvelopeBatch {
			sort.SliceStable(rs, func(i, j int) bool { return taskOf(rs[i]) < taskOf(rs[j]) })
		}
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
	}
	return v
}

func taskOf(v any) string {
	m, _ := v.(map[string]any)
	s, _ := m["task_id"].(string)
	return s
}

// drop deletes the value at the JSON Pointer p from v, reporting whether there was one.
func drop(v any, p string) bool {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, part := range parts {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		last := i == len(parts)-1
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[part]
			if !ok {
				return false
			}
			if last {
				delete(x, part)
				return true
			}
			v = next
		case []any:
			n, err := strconv.Atoi(part)
			if err != nil || n < 0 || n >= len(x) || last {
				return false // an array element is never dropped, only its members
			}
			v = x[n]
		default:
			return false
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
