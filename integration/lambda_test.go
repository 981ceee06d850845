package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/dispatch/transport"
	"github.com/convergeplane/converge/dispatch/transport/lambdatest"
	"github.com/convergeplane/converge/webhooksdk"
	sdklambda "github.com/convergeplane/converge/webhooksdk/lambda"
)

// lambdaProvider serves one kind; with children > 0 it composes that many
// "leaf" children.
type lambdaProvider struct {
	kind     string
	children int
	runs     atomic.Int32
}

func (p *lambdaProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}
func (p *lambdaProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	p.runs.Add(1)
	out := webhooksdk.Outcome{Status: json.RawMessage(`{"via":"lambda"}`)}
	for i := range p.children {
		out.Children = append(out.Children, webhooksdk.Child{Kind: "leaf", KindVersion: 1, Name: fmt.Sprintf("%s-%d", req.Resource.Name, i)})
	}
	return out, nil
}

var lambdaSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("lambda-integration-secret-0123456789"))

// lambdaHandler is the webhooksdk endpoint behind a test Function URL.
func lambdaHandler(t testing.TB, providers ...webhooksdk.Provider) *webhooksdk.Endpoint {
	h, err := webhooksdk.Handler(providers, webhooksdk.WithSecrets(lambdaSecret))
	must(t, err)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	return h
}

// lambdaFunc is a test function's handler: the real Lambda adapter.
func lambdaFunc(t testing.TB, providers ...webhooksdk.Provider) lambdatest.Handler {
	h, err := sdklambda.New(providers, webhooksdk.WithSecrets(lambdaSecret))
	must(t, err)
	return h.Serve
}

// registerLambda registers endpoint name for kinds with target through the
// API, signing with lambdaSecret.
func (s *server) registerLambda(name string, target map[string]any, health map[string]any, kinds ...string) {
	s.t.Helper()
	ks := make([]map[string]any, len(kinds))
	for i, k := range kinds {
		ks[i] = map[string]any{"kind": k, "kind_version": 1}
	}
	if code, body := s.call("POST", "/endpoints", map[string]any{"name": name, "kinds": ks, "target": target,
		"health": health, "secret": lambdaSecret}); code != 201 {
		s.t.Fatalf("register %s = %d %s", name, code, body)
	}
}

func (s *server) lambdaManifests(reactions map[string]string) {
	s.t.Helper()
	for kind, r := range reactions {
		if code, body := s.call("PUT", "/kinds/"+kind+"/manifest", map[string]any{"kind": kind, "kind_version": 1,
			"reactions": json.RawMessage(r)}); code != 201 {
			s.t.Fatalf("manifest %s = %d %s", kind, code, body)
		}
	}
}

func (s *server) applyEmpty(kind, name string) {
	s.t.Helper()
	if code, body := s.call("POST", "/resources", map[string]any{"kind": kind, "kind_version": 1, "name": name, "spec": map[string]any{}}); code != 201 {
		s.t.Fatalf("apply %s/%s = %d %s", kind, name, code, body)
	}
}

type lambdaDetail struct {
	Phase     string          `json:"phase"`
	Parked    string          `json:"parked"`
	LastError json.RawMessage `json:"last_error"`
	Task      *struct {
		Attempts  int    `json:"attempts"`
		LastError string `json:"last_error"`
	} `json:"task"`
}

func (s *server) lambdaDetail(kind, name string) lambdaDetail {
	var d lambdaDetail
	_, body := s.call("GET", "/resources/"+kind+"/"+name, nil)
	_ = json.Unmarshal(body, &d)
	return d
}

// lambdaDeliveries lists an endpoint's delivery log, newest first, with
// query q (e.g. failed=true).
func (s *server) lambdaDeliveries(endpoint, q string) []map[string]any {
	var ds struct{ Items []map[string]any }
	_, body := s.call("GET", "/endpoints/"+endpoint+"/deliveries?"+q, nil)
	_ = json.Unmarshal(body, &ds)
	return ds.Items
}

// TestLambdaTargets runs the whole product against the Invoke-API test
// server: endpoints registered through the API, deliveries SigV4-signed
// and verified on every call.
func TestLambdaTargets(t *testing.T) {
	t.Parallel()
	s := startAllWith(t, func(c *convergecli.Config) { c.AWS = lambdatest.AWSConfig })
	ls := lambdatest.New(t)
	leafR := `[{"name":"work","trigger":"specChange","emits":["status"]}]`
	s.lambdaManifests(map[string]string{"leaf": leafR, "comp": `[{"name":"compose","trigger":"specChange","emits":["children","status"]}]`,
		"evt": leafR, "flaky": leafR, "doomed": leafR, "busy": leafR, "ghost": leafR, "urliam": leafR, "urlnone": leafR})
	fn := func(name, invocation string) map[string]any {
		return map[string]any{"type": "lambda", "function": name, "region": lambdatest.Region, "invocation": invocation, "endpoint_url": ls.URL}
	}
	invoke := map[string]any{"type": "invoke", "interval_secs": 1, "healthy_threshold": 1, "unhealthy_threshold": 1}
	none := map[string]any{"type": "none"}

	leaf, comp := &lambdaProvider{kind: "leaf"}, &lambdaProvider{kind: "comp", children: 3}
	ls.Add("sync-fn", lambdaFunc(t, leaf, comp))
	s.registerLambda("lam-sync", fn("arn:aws:lambda:eu-west-1:123456789012:function:sync-fn", "sync"), invoke, "leaf", "comp")

	evt := &lambdaProvider{kind: "evt"}
	async := ls.Add("async-fn", lambdaFunc(t, evt))
	s.registerLambda("lam-async", fn("async-fn", "async"), none, "evt")

	var flakyCalls atomic.Int32
	flaky := ls.Add("flaky-fn", lambdaFunc(t, &lambdaProvider{kind: "flaky"}))
	flaky.FailWith(func() *transport.FunctionError {
		if flakyCalls.Add(1) <= 2 {
			return &transport.FunctionError{Kind: "Handled", Type: "errorString", Message: "boom: the database is down"}
		}
		return nil
	})
	s.registerLambda("lam-flaky", fn("flaky-fn", ""), none, "flaky")

	doomed := ls.Add("doomed-fn", lambdaFunc(t, &lambdaProvider{kind: "doomed"}))
	doomed.FailWith(func() *transport.FunctionError {
		return &transport.FunctionError{Kind: "Handled", Type: transport.TerminalErrorType, Message: "the spec can never work"}
	})
	s.registerLambda("lam-doomed", fn("doomed-fn", ""), none, "doomed")

	busy := ls.Add("busy-fn", lambdaFunc(t, &lambdaProvider{kind: "busy"}))
	busy.Throttle.Store(3)
	s.registerLambda("lam-busy", fn("busy-fn", ""), none, "busy")

	s.registerLambda("lam-ghost", fn("no-such-fn", ""), none, "ghost")

	var urlInvalid atomic.Int64
	iam := &lambdaProvider{kind: "urliam"}
	iamSrv := httptest.NewServer(lambdatest.URLHandler(lambdaHandler(t, iam), true, &urlInvalid))
	t.Cleanup(iamSrv.Close)
	s.registerLambda("url-iam", map[string]any{"type": "lambda_url", "url": iamSrv.URL + "/", "region": lambdatest.Region, "auth": "aws_iam"}, invoke, "urliam")
	plain := &lambdaProvider{kind: "urlnone"}
	plainSrv := httptest.NewServer(lambdatest.URLHandler(lambdaHandler(t, plain), false, &urlInvalid))
	t.Cleanup(plainSrv.Close)
	s.registerLambda("url-none", map[string]any{"type": "lambda_url", "url": plainSrv.URL + "/", "region": lambdatest.Region, "auth": "none"}, none, "urlnone")

	for _, r := range [][2]string{{"comp", "c1"}, {"evt", "e1"}, {"flaky", "f1"}, {"doomed", "d1"}, {"busy", "b1"}, {"ghost", "g1"}, {"urliam", "u1"}, {"urlnone", "n1"}} {
		s.applyEmpty(r[0], r[1])
	}

	t.Run("SyncLeafAndComposite", func(t *testing.T) {
		waitFor(t, 60*time.Second, "c1 and its 3 children Ready", func() bool {
			return s.count(`SELECT count(*) FROM resources WHERE phase = 'Ready' AND (name = 'c1' OR name LIKE 'c1-%')`) == 4
		})
		if leaf.runs.Load() < 3 || comp.runs.Load() < 1 {
			t.Errorf("runs: leaf %d comp %d", leaf.runs.Load(), comp.runs.Load())
		}
	})
	t.Run("EventCompletesByCallback", func(t *testing.T) {
		waitFor(t, 60*time.Second, "e1 Ready", func() bool { return s.lambdaDetail("evt", "e1").Phase == "Ready" })
		if async.Events.Load() < 1 || async.Events.Load() != async.Invocations.Load() {
			t.Errorf("async function: %d Event invocations of %d", async.Events.Load(), async.Invocations.Load())
		}
	})
	t.Run("FunctionErrorIsTransient", func(t *testing.T) {
		waitFor(t, 90*time.Second, "f1 Ready after two function errors", func() bool { return s.lambdaDetail("flaky", "f1").Phase == "Ready" })
		// The delivery log is written beside the completion, so a moment after it.
		waitFor(t, 5*time.Second, "lam-flaky's three attempts logged", func() bool { return len(s.lambdaDeliveries("lam-flaky", "")) >= 3 })
		ds := s.lambdaDeliveries("lam-flaky", "failed=true")
		if len(ds) != 2 || ds[0]["classification"] != "task_error" || !strings.Contains(fmt.Sprint(ds[0]["excerpt"]), "boom: the database is down") {
			t.Errorf("lam-flaky deliveries = %v, want 2 task_error carrying the function's error", ds)
		}
		// The success that followed is in the log too.
		if all := s.lambdaDeliveries("lam-flaky", ""); len(all) != 3 || all[0]["classification"] != "ok" || all[0]["failed"] != false {
			t.Errorf("lam-flaky log = %v, want the two failures and the success", all)
		}
	})
	t.Run("TerminalFunctionErrorPinsFailed", func(t *testing.T) {
		waitFor(t, 60*time.Second, "d1 Failed", func() bool { return s.lambdaDetail("doomed", "d1").Phase == "Failed" })
		if d := s.lambdaDetail("doomed", "d1"); !strings.Contains(string(d.LastError), "the spec can never work") {
			t.Errorf("d1 last_error = %s", d.LastError)
		}
	})
	t.Run("ThrottleDoesNotBurnAttempts", func(t *testing.T) {
		waitFor(t, 60*time.Second, "b1 Ready", func() bool { return s.lambdaDetail("busy", "b1").Phase == "Ready" })
		if busy.Throttled.Load() != 3 || busy.Invocations.Load() != 1 {
			t.Errorf("busy: %d throttled, %d ran; want 3, 1", busy.Throttled.Load(), busy.Invocations.Load())
		}
		waitFor(t, 5*time.Second, "lam-busy's three throttles logged", func() bool { return len(s.lambdaDeliveries("lam-busy", "failed=true")) >= 3 })
		ds := s.lambdaDeliveries("lam-busy", "failed=true")
		if len(ds) != 3 {
			t.Fatalf("lam-busy deliveries = %v, want 3 rate_limited", ds)
		}
		for _, d := range ds {
			if d["classification"] != "rate_limited" || d["attempt"] != float64(1) {
				t.Errorf("throttled delivery %v: want rate_limited at attempt 1 (no attempt burnt)", d)
			}
		}
	})
	t.Run("MissingFunctionParks", func(t *testing.T) {
		var d lambdaDetail
		waitFor(t, 60*time.Second, "g1 parked naming the missing function", func() bool {
			d = s.lambdaDetail("ghost", "g1")
			return strings.Contains(d.Parked, "ResourceNotFoundException")
		})
		t.Logf("parked: %s", d.Parked)
		if d.Task == nil || d.Task.Attempts != 0 {
			t.Errorf("g1 task = %+v, want attempts 0", d.Task)
		}
		var ep struct {
			Enabled        bool   `json:"enabled"`
			DisabledReason string `json:"disabled_reason"`
		}
		_, body := s.call("GET", "/endpoints/lam-ghost", nil)
		if json.Unmarshal(body, &ep) != nil || ep.Enabled || !strings.Contains(ep.DisabledReason, "no-such-fn") {
			t.Errorf("lam-ghost = %s, want disabled naming the function", body)
		}
	})
	t.Run("FunctionURL", func(t *testing.T) {
		waitFor(t, 60*time.Second, "u1 and n1 Ready", func() bool {
			return s.lambdaDetail("urliam", "u1").Phase == "Ready" && s.lambdaDetail("urlnone", "n1").Phase == "Ready"
		})
		if urlInvalid.Load() != 0 || iam.runs.Load() == 0 || plain.runs.Load() == 0 {
			t.Errorf("function URLs: %d invalid signatures, runs iam %d none %d", urlInvalid.Load(), iam.runs.Load(), plain.runs.Load())
		}
	})
	t.Run("SigV4OnEveryCall", func(t *testing.T) {
		if ls.Calls.Load() == 0 || ls.Invalid.Load() != 0 {
			t.Errorf("Invoke API: %d calls, %d with an invalid signature", ls.Calls.Load(), ls.Invalid.Load())
		}
	})
	t.Run("BadRegistrations", func(t *testing.T) {
		for _, tc := range []struct {
			target map[string]any
			loc    string
		}{
			{map[string]any{"type": "lambda", "region": "eu-west-1"}, "target.function"},
			{map[string]any{"type": "lambda", "function": "f"}, "target.region"},
			{map[string]any{"type": "lambda", "function": "f", "region": "eu-west-1", "invocation": "soon"}, "target.invocation"},
			{map[string]any{"type": "lambda", "function": "f", "region": "eu-west-1", "endpoint_url": "http://169.254.169.254/"}, "target.endpoint_url"},
			{map[string]any{"type": "lambda_url", "url": "https://example.com/"}, "target.url"},
			{map[string]any{"type": "lambda_url", "url": "https://abc.lambda-url.eu-west-1.on.aws/", "auth": "sigv4"}, "target.auth"},
		} {
			code, body := s.call("POST", "/endpoints", map[string]any{"name": "bad", "kinds": []map[string]any{{"kind": "leaf", "kind_version": 1}}, "target": tc.target})
			if code != 422 || !strings.Contains(string(body), tc.loc) {
				t.Errorf("%v = %d %s, want 422 naming %s", tc.target, code, body, tc.loc)
			}
		}
	})
	s.checkInvariants()
}
