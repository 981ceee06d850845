// Command provider is the chaos suite's provider process: the kinds leaf and
// comp (a composite whose compose reaction creates leaf children and whose
// rollup reports them) served with webhooksdk, with faults injected from
// its flags and seed, and every call it handles appended to its call log
// (chaos/internal/calllog) before it is answered.
//
// While faults are on (until -faults-until), each delivery draws from its
// webhook-id and the seed: extra latency up to -latency; a 503 without
// running Work (-p-5xx); a timeout (-p-timeout): the provider holds the
// request until the dispatcher gives up on it (or -hang), then runs it
// anyway and, as a provider that answers late would, posts the result to
// the envelope's callback (inline or, its sync budget spent, by the SDK's
// callback) every 50ms for -late-for, while the task is retried under a
// newer claim: each of these stale results must be refused;
// a Work slower than the sync budget, so the SDK answers 202 and calls back
// (-p-async). Each callback then draws: dropped (the SDK is told it was
// delivered, and it never arrives) with -p-drop, or sent twice with -p-dup.
//
// PROVIDER_ADDR and PROVIDER_SECRETS configure the listener and the
// endpoint's signing secret, as for the example providers.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/convergeplane/converge/chaos/internal/calllog"
	"github.com/convergeplane/converge/webhooksdk"
)

type faults struct {
	seed       uint64
	until      time.Time
	latency    time.Duration
	work       time.Duration
	p5xx       float64
	pTimeout   float64
	pAsync     float64
	pDrop      float64
	pDup       float64
	hang       time.Duration
	lateFor    time.Duration
	syncBudget time.Duration
	logPath    string
	boot       int
}

func main() {
	var f faults
	var until int64
	flag.Uint64Var(&f.seed, "seed", 1, "the run's seed")
	flag.Int64Var(&until, "faults-until", 0, "unix milliseconds after which no fault is injected (0: never inject)")
	flag.DurationVar(&f.latency, "latency", 0, "extra latency, uniform up to this, while faults are on")
	flag.DurationVar(&f.work, "work", 10*time.Millisecond, "the time every Work takes (paces the run)")
	flag.Float64Var(&f.p5xx, "p-5xx", 0, "chance a delivery is answered 503")
	flag.Float64Var(&f.pTimeout, "p-timeout", 0, "chance a delivery is held until the dispatcher gives up, then answered late by callback")
	flag.Float64Var(&f.pAsync, "p-async", 0, "chance a Work outlasts the sync budget (202, then a callback)")
	flag.Float64Var(&f.pDrop, "p-drop", 0, "chance an async callback is dropped")
	flag.Float64Var(&f.pDup, "p-dup", 0, "chance an async callback is sent twice")
	flag.DurationVar(&f.hang, "hang", 5*time.Second, "the longest a timed-out delivery is held")
	flag.DurationVar(&f.lateFor, "late-for", 10*time.Second, "how long a timed-out delivery's result is posted to its callback, every 50ms")
	flag.DurationVar(&f.syncBudget, "sync-budget", 300*time.Millisecond, "the SDK's sync budget")
	flag.StringVar(&f.logPath, "log", "provider-calls.jsonl", "the call log")
	flag.IntVar(&f.boot, "boot", 0, "which start of the provider this is")
	flag.Parse()
	if until > 0 {
		f.until = time.UnixMilli(until)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := run(context.Background(), f, log); err != nil {
		log.Error("chaos provider failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f faults, log *slog.Logger) error {
	owed := map[string]bool{}
	if f.boot > 0 {
		prior, err := calllog.Read(f.logPath)
		if err != nil {
			return err
		}
		owed = owedAfter(prior)
	}
	calls, err := calllog.Open(f.logPath)
	if err != nil {
		return err
	}
	defer calls.Close()
	p := &provider{f: f, calls: calls, ids: map[string]string{}, late: map[string]struct{}{},
		drawn: map[string]int{}, injected: map[string]int{}, owed: owed}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &callbacks{p: p, next: http.DefaultTransport},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return webhooksdk.ListenAndServe(ctx, os.Getenv("PROVIDER_ADDR"), []webhooksdk.Provider{&kind{p: p, name: "leaf"}, &kind{p: p, name: "comp"}},
		webhooksdk.WithSecrets(strings.Split(os.Getenv("PROVIDER_SECRETS"), ",")...),
		webhooksdk.WithSyncBudget(f.syncBudget), webhooksdk.WithHTTPClient(client),
		webhooksdk.WithCallbackRetry(200*time.Millisecond, 2*time.Second, time.Minute), webhooksdk.WithLogger(log),
		// Each Result to its own callback URL: the fault transport below logs,
		// drops and duplicates callbacks one task at a time. Batched callbacks
		// (protocol §8.1) have their own tests in dispatch/callback and webhooksdk.
		webhooksdk.WithCallbackBatch(0, 1),
		// A stop leaves what is unfinished by then to the dispatcher's retries.
		webhooksdk.WithDrainTimeout(10*time.Second),
		// Every delivery passes the fault injector and its log first.
		webhooksdk.WithMiddleware(func(ep http.Handler) http.Handler {
			p.next = ep
			return p
		}))
}

type provider struct {
	f     faults
	calls *calllog.Writer
	next  http.Handler

	mu   sync.Mutex
	ids  map[string]string   // "task/epoch" -> webhook-id, for Work's record
	late map[string]struct{} // "task/epoch" of timed-out deliveries: their callbacks are sent late, again and again
	// drawn counts each fault's draws since this start, injected the draws
	// that injected it (see draw).
	drawn, injected map[string]int
	// owed are the faults a restarted provider injects at their next draw
	// (see owedAfter).
	owed map[string]bool
}

// roll draws a number in [0, 1) for one decision about one key.
func (p *provider) roll(key, decision string) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key + "/" + decision))
	return rand.New(rand.NewPCG(p.f.seed, h.Sum64())).Float64()
}

func (p *provider) faulting() bool { return time.Now().Before(p.f.until) }

// draw decides whether one decision (key) injects fault, with chance pr.
// The rolls are random, and a short run can draw none of a fault: seed
// 252307 of CI's short run held none of about 70 deliveries (0.92^70, about
// 0.3 %), and so tested neither timeouts nor late callbacks; seed 213229's
// few async callbacks drew no drop. So each fault is owed: once `after`
// draws in a row have injected none since this start, the next injects it,
// and a restarted provider owes at once what the call log does not show
// (owedAfter).
func (p *provider) draw(key, fault string, pr float64, after int) bool {
	if pr <= 0 {
		return false
	}
	hit := p.roll(key, fault) < pr
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawn[fault]++
	hit = hit || (p.injected[fault] == 0 && (p.owed[fault] || p.drawn[fault] > after))
	if hit {
		p.injected[fault]++
	}
	return hit
}

// owedAfter returns the faults the call log of the provider's earlier
// starts shows none of: a restarted provider injects each at its first
// draw. Its counts start again at zero, and the run's fault window may be
// nearly spent, so owing only after `after` draws of its own could leave a
// fault untested; and a fault injected before a kill may be missing from
// the log (a held timeout is logged when it is answered: seed 616493 lost
// CI's only timeout that way, and with it every late callback).
func owedAfter(prior []calllog.Record) map[string]bool {
	owed := map[string]bool{"5xx": true, "timeout": true, "async": true, "drop": true, "dup": true}
	for _, r := range prior {
		switch {
		case r.Type == calllog.Delivery && r.Fault != "":
			delete(owed, r.Fault) // 5xx, timeout
		case r.Type == calllog.Delivery && r.Answer == "202":
			delete(owed, "async")
		case r.Type == calllog.Callback && r.Fault == "drop":
			delete(owed, "drop")
		case r.Type == calllog.Callback && r.Fault == "dup-first":
			delete(owed, "dup")
		}
	}
	return owed
}

func (p *provider) record(r calllog.Record) {
	r.Boot = p.f.boot
	if err := p.calls.Write(r); err != nil {
		panic(fmt.Sprintf("chaos provider: call log: %v", err)) // an unlogged call would void the checks
	}
}

// ServeHTTP injects the delivery faults and logs each delivery with its answer.
func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var env webhooksdk.Envelope
	if json.Unmarshal(body, &env) != nil || env.Type != "task" || env.Resource == nil {
		p.next.ServeHTTP(w, r) // health probes, and anything the SDK should refuse
		return
	}
	id := r.Header.Get("webhook-id")
	rec := calllog.Record{Type: calllog.Delivery, WebhookID: id, TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch,
		Resource: env.Resource.ID, Generation: env.Resource.Generation, Reaction: env.Reaction}
	if p.faulting() {
		time.Sleep(time.Duration(p.roll(id, "latency") * float64(p.f.latency)))
		switch {
		case p.draw(id, "5xx", p.f.p5xx, 20):
			rec.Fault, rec.Answer = "5xx", "503"
			p.record(rec)
			http.Error(w, "chaos: injected 503", http.StatusServiceUnavailable)
			return
		case p.draw(id, "timeout", p.f.pTimeout, 20):
			rec.Fault = "timeout"
			select {
			case <-r.Context().Done():
			case <-time.After(p.f.hang):
			}
			r = r.WithContext(context.WithoutCancel(r.Context()))
		}
	}
	key := fmt.Sprintf("%s/%d", env.TaskID, env.ClaimEpoch)
	p.mu.Lock()
	p.ids[key] = id
	if rec.Fault == "timeout" {
		p.late[key] = struct{}{} // the SDK, its budget spent, may answer by callback
	}
	p.mu.Unlock()
	out := httptest.NewRecorder()
	p.next.ServeHTTP(out, r)
	rec.Answer = fmt.Sprint(out.Code)
	if out.Code == http.StatusOK {
		var res webhooksdk.Result
		if json.Unmarshal(out.Body.Bytes(), &res) == nil && res.Outcome != nil {
			rec.Success, rec.Answer = true, "200 outcome"
		} else {
			rec.Answer = "200 error"
		}
	}
	p.record(rec)
	if rec.Fault == "timeout" && rec.Success && env.Callback != nil {
		go p.answerLate(env.Callback.URL, env.Callback.Token, env.TaskID, env.ClaimEpoch, out.Body.Bytes())
	}
	for k, v := range out.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(out.Code)
	_, _ = w.Write(out.Body.Bytes())
}

// answerLate posts a timed-out delivery's result to its callback, again and
// again: the dispatcher gave that claim up, so converge must refuse each one.
func (p *provider) answerLate(url, token, task string, claimEpoch int64, result []byte) {
	var res webhooksdk.Result
	_ = json.Unmarshal(result, &res) // an unreadable one is logged as a failure
	client := &http.Client{Timeout: 5 * time.Second}
	for end := time.Now().Add(p.f.lateFor); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		rec := calllog.Record{Type: calllog.Callback, TaskID: task, ClaimEpoch: claimEpoch, Success: res.Outcome != nil, Fault: "late"}
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(result))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		// Logged before it is sent: a callback converge might accept is
		// never missing from the log.
		rec.Answer = "sending"
		p.record(rec)
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		rec.Answer = fmt.Sprint(resp.StatusCode)
		p.record(rec)
	}
}

// callbacks is the SDK's transport for callbacks and heartbeats: it logs
// each callback and drops or duplicates some.
type callbacks struct {
	p    *provider
	next http.RoundTripper
}

func (c *callbacks) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/outcome") || r.Body == nil {
		return c.next.RoundTrip(r) // heartbeats
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	var res webhooksdk.Result
	_ = json.Unmarshal(body, &res) // an unreadable one is logged as a failure
	rec := calllog.Record{Type: calllog.Callback, TaskID: res.TaskID, ClaimEpoch: res.ClaimEpoch, Success: res.Outcome != nil}
	key := fmt.Sprintf("%s/%d", res.TaskID, res.ClaimEpoch)
	c.p.mu.Lock()
	_, late := c.p.late[key]
	delete(c.p.late, key)
	c.p.mu.Unlock()
	if late {
		go c.p.answerLate(r.URL.String(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), res.TaskID, res.ClaimEpoch, body)
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	}
	send := func(fault string) (*http.Response, error) {
		req := r.Clone(context.WithoutCancel(r.Context()))
		req.Body = io.NopCloser(bytes.NewReader(body))
		rec := rec
		rec.Fault = fault
		// Logged before it is sent, as answerLate's are: converge may apply
		// a callback whose answer this process never lives to log.
		rec.Answer = "sending"
		c.p.record(rec)
		resp, err := c.next.RoundTrip(req)
		if err != nil {
			rec.Answer = "error: " + err.Error()
		} else {
			rec.Answer = fmt.Sprint(resp.StatusCode)
		}
		c.p.record(rec)
		return resp, err
	}
	if c.p.faulting() {
		switch {
		case c.p.draw(key, "drop", c.p.f.pDrop, 2):
			rec.Fault, rec.Answer = "drop", "dropped"
			c.p.record(rec)
			return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{},
				Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
		case c.p.draw(key, "dup", c.p.f.pDup, 2):
			resp, err := send("dup-first")
			if err != nil {
				return nil, err
			}
			_ = resp.Body.Close()
			return send("dup-second")
		}
	}
	return send("")
}

// kind serves leaf or comp. Every outcome's status names the claim it was
// produced under (task, epoch, boot), which the suite checks against the
// claim the engine accepted it for.
type kind struct {
	p    *provider
	name string
}

func (k *kind) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: k.name, Version: 1}
}

func (k *kind) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	p := k.p
	key := fmt.Sprintf("%s/%d", req.TaskID, req.ClaimEpoch)
	p.mu.Lock()
	id := p.ids[key]
	delete(p.ids, key)
	p.mu.Unlock()
	d := p.f.work
	if p.faulting() && p.draw(id, "async", p.f.pAsync, 10) {
		d += p.f.syncBudget + time.Duration(p.roll(id, "async-time")*float64(time.Second))
	}
	rec := calllog.Record{Type: calllog.Work, WebhookID: id, TaskID: req.TaskID, ClaimEpoch: req.ClaimEpoch,
		Resource: req.Resource.ID, Generation: req.Generation, Reaction: req.Reaction}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		rec.Answer = "cancelled"
		p.record(rec)
		return webhooksdk.Outcome{}, context.Cause(ctx)
	}
	out, err := k.outcome(req)
	rec.Success = err == nil
	rec.Answer = "outcome"
	if err != nil {
		rec.Answer = err.Error()
	}
	p.record(rec)
	return out, err
}

func (k *kind) outcome(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	claim := map[string]any{"task": req.TaskID, "epoch": req.ClaimEpoch, "boot": k.p.f.boot}
	status := func(extra map[string]any) json.RawMessage {
		for n, v := range claim {
			extra[n] = v
		}
		b, _ := json.Marshal(extra)
		return b
	}
	switch req.Reaction {
	case "work":
		return webhooksdk.Outcome{Status: status(map[string]any{}),
			Conditions: []webhooksdk.Condition{{Type: "Ready", Status: "True", Reason: "Done"}}}, nil
	case "compose":
		var spec struct{ Children int }
		if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
			return webhooksdk.Outcome{}, webhooksdk.Terminal(err)
		}
		out := webhooksdk.Outcome{Status: status(map[string]any{"composed": spec.Children})}
		for i := range spec.Children {
			out.Children = append(out.Children, webhooksdk.Child{Kind: "leaf", KindVersion: 1,
				Name: fmt.Sprintf("%s-c%d", req.Resource.Name, i), Spec: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		}
		return out, nil
	case "rollup":
		ready := 0
		for _, d := range req.Descendants {
			if d.Phase == "Ready" {
				ready++
			}
		}
		out := webhooksdk.Outcome{Status: status(map[string]any{"ready": ready, "total": len(req.Descendants)})}
		if ready == len(req.Descendants) {
			out.Conditions = []webhooksdk.Condition{{Type: "Ready", Status: "True", Reason: "AllChildrenReady"}}
		} else {
			out.Conditions = []webhooksdk.Condition{{Type: "Ready", Status: "False", Reason: "ChildrenNotReady"}}
		}
		return out, nil
	}
	return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New("unknown reaction " + req.Reaction))
}
