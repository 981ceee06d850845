package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/reaper"
	"github.com/convergeplane/converge/webhooksdk"
)

// runProvider is a leaf whose status counts its runs, so an outcome says
// which run produced it; fail makes Work fail (a task error answered
// inline), delay makes it outlast the SDK's sync budget (a 202, then a
// callback).
type runProvider struct {
	kind  string
	delay time.Duration
	fail  atomic.Bool
	runs  atomic.Int32
}

func (p *runProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}
func (p *runProvider) Work(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
	n := p.runs.Add(1)
	if p.delay > 0 {
		select {
		case <-time.After(p.delay):
		case <-ctx.Done():
			return webhooksdk.Outcome{}, ctx.Err()
		}
	}
	if p.fail.Load() {
		return webhooksdk.Outcome{}, errors.New("disk on fire")
	}
	return webhooksdk.Outcome{Status: json.RawMessage(`{"run":` + strconv.Itoa(int(n)) + `}`)}, nil
}

type deliveryView struct {
	ID       int64  `json:"id"`
	Endpoint string `json:"endpoint"`
	Resource struct {
		ID, Kind, Name string
	} `json:"resource"`
	TaskID         string `json:"task_id"`
	TaskType       string `json:"task_type"`
	ClaimEpoch     int64  `json:"claim_epoch"`
	Attempt        int    `json:"attempt"`
	HTTPStatus     int    `json:"http_status"`
	Classification string `json:"classification"`
	Failed         bool   `json:"failed"`
	Excerpt        string `json:"excerpt"`
}

type deliveryPage struct {
	Items      []deliveryView `json:"items"`
	NextCursor string         `json:"next_cursor"`
}

// deliveries lists the log with query q (newest first).
func (s *server) deliveries(q string) deliveryPage {
	s.t.Helper()
	code, body := s.call("GET", "/deliveries?"+q, nil)
	var p deliveryPage
	if code != 200 || json.Unmarshal(body, &p) != nil {
		s.t.Fatalf("GET /deliveries?%s = %d %s", q, code, body)
	}
	return p
}

func (s *server) leafManifest(kind string) {
	s.t.Helper()
	if code, body := s.call("PUT", "/kinds/"+kind+"/manifest", map[string]any{"kind": kind, "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
		s.t.Fatalf("manifest %s = %d %s", kind, code, body)
	}
}

func (s *server) applyLeaf(kind, name string) {
	s.t.Helper()
	if code, body := s.call("POST", "/resources", map[string]any{"kind": kind, "kind_version": 1, "name": name, "spec": map[string]any{}}); code != 201 {
		s.t.Fatalf("apply %s/%s = %d %s", kind, name, code, body)
	}
}

// TestDeliveryLog runs the product with real HTTP providers and reads the
// delivery log through the API: a success, a task error with its excerpt,
// a 202 followed by its callback, one row per task of a batch; pages with
// filters; a replay that reaches the provider again under a new claim and
// whose new outcome is the resource's; refusals that name the field and
// write nothing; the reaper's retention by age and by count.
func TestDeliveryLog(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	for _, k := range []string{"logged", "slow", "bulk"} {
		s.leafManifest(k)
	}
	inline := &runProvider{kind: "logged"}
	s.serveProvider("sync", inline)

	// A success is recorded: classification ok, no excerpt.
	s.applyLeaf("logged", "r1")
	s.waitPhase("logged", "r1", string(model.PhaseReady), 30*time.Second)
	var ok deliveryView
	waitFor(t, 10*time.Second, "r1's delivery in the log", func() bool {
		p := s.deliveries("kind=logged&name=r1")
		if len(p.Items) == 1 {
			ok = p.Items[0]
		}
		return len(p.Items) == 1
	})
	if ok.Classification != "ok" || ok.Failed || ok.HTTPStatus != 200 || ok.Excerpt != "" || ok.Endpoint != "sync" ||
		ok.Resource.Kind != "logged" || ok.Resource.Name != "r1" || ok.Resource.ID == "" || ok.TaskType != "reconcile" ||
		ok.ClaimEpoch < 1 || ok.Attempt != 1 {
		t.Fatalf("success = %+v", ok)
	}
	var one deliveryView
	if code, body := s.call("GET", fmt.Sprintf("/deliveries/%d", ok.ID), nil); code != 200 || json.Unmarshal(body, &one) != nil || one != ok {
		t.Fatalf("GET /deliveries/%d = %d %s, want %+v", ok.ID, code, body, ok)
	}

	// A failure is recorded with its excerpt, and is the resource detail's.
	inline.fail.Store(true)
	s.applyLeaf("logged", "r2")
	var failed deliveryView
	waitFor(t, 30*time.Second, "r2's failure in the log", func() bool {
		p := s.deliveries("kind=logged&name=r2&failed=true")
		if len(p.Items) > 0 {
			failed = p.Items[len(p.Items)-1]
		}
		return len(p.Items) > 0
	})
	if failed.Classification != "task_error" || !failed.Failed || !strings.Contains(failed.Excerpt, "disk on fire") {
		t.Fatalf("failure = %+v", failed)
	}
	var detail struct {
		Deliveries []deliveryView `json:"recent_failed_deliveries"`
	}
	if _, body := s.call("GET", "/resources/logged/r2", nil); json.Unmarshal(body, &detail) != nil || len(detail.Deliveries) == 0 ||
		detail.Deliveries[len(detail.Deliveries)-1] != failed {
		t.Errorf("r2's detail shows %+v, want its failures ending with %+v", detail.Deliveries, failed)
	}
	inline.fail.Store(false)
	s.waitPhase("logged", "r2", string(model.PhaseReady), 60*time.Second)

	// Accepted, then the callback: two rows of one claim.
	slow := &runProvider{kind: "slow", delay: webhooksdk.SyncBudgetDefault + 500*time.Millisecond}
	s.serveProvider("async", slow)
	s.applyLeaf("slow", "a1")
	s.waitPhase("slow", "a1", string(model.PhaseReady), 60*time.Second)
	var async deliveryPage
	waitFor(t, 10*time.Second, "a1's accepted delivery and its callback", func() bool {
		async = s.deliveries("kind=slow&name=a1")
		return len(async.Items) == 2
	})
	cb, acc := async.Items[0], async.Items[1]
	if acc.Classification != "accepted" || acc.HTTPStatus != 202 || acc.Failed || acc.Endpoint != "async" ||
		cb.Classification != "callback_ok" || cb.Failed || cb.TaskID != acc.TaskID || cb.ClaimEpoch != acc.ClaimEpoch ||
		cb.Resource != acc.Resource || cb.Endpoint != "async" {
		t.Fatalf("async rows = %+v, want accepted then callback_ok of the same claim", async.Items)
	}

	// A batch: one row per task, though fewer requests were made.
	var batches atomic.Int32
	bulk := &runProvider{kind: "bulk"}
	s.serveProviderWith("batched", endpointExtras{fields: map[string]any{"max_batch": 8}}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.HasPrefix(body, []byte(`{"type":"batch"`)) {
				batches.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			h.ServeHTTP(w, r)
		})
	}, bulk)
	s.waitEndpointReady("batched")
	items := make([]map[string]any, 6)
	for i := range items {
		items[i] = map[string]any{"kind": "bulk", "kind_version": 1, "name": fmt.Sprintf("b%d", i), "spec": map[string]any{}}
	}
	if code, body := s.call("POST", "/resources:batch", map[string]any{"items": items}); code != 200 {
		t.Fatalf("batch apply = %d %s", code, body)
	}
	for i := range items {
		s.waitPhase("bulk", fmt.Sprintf("b%d", i), string(model.PhaseReady), 60*time.Second)
	}
	waitFor(t, 10*time.Second, "six rows for the batched endpoint", func() bool {
		return len(s.deliveries("endpoint=batched").Items) == 6
	})
	if batches.Load() == 0 {
		t.Logf("no batch request was made (the tasks were claimed one by one); the rows are still one per task")
	}
	// Pages with filters: 4 then 2, each resource once, nothing failed.
	first := s.deliveries("endpoint=batched&classification=ok&limit=4")
	if len(first.Items) != 4 || first.NextCursor == "" {
		t.Fatalf("first page = %d items, cursor %q", len(first.Items), first.NextCursor)
	}
	second := s.deliveries("endpoint=batched&classification=ok&limit=4&cursor=" + first.NextCursor)
	if len(second.Items) != 2 || second.NextCursor != "" {
		t.Fatalf("second page = %d items, cursor %q", len(second.Items), second.NextCursor)
	}
	seen := map[string]bool{}
	for _, d := range append(first.Items, second.Items...) {
		if d.Classification != "ok" || d.Endpoint != "batched" || seen[d.Resource.Name] {
			t.Errorf("paged row %+v (seen %v)", d, seen)
		}
		seen[d.Resource.Name] = true
	}
	if p := s.deliveries("endpoint=batched&failed=true"); len(p.Items) != 0 {
		t.Errorf("failed batched rows = %+v", p.Items)
	}
	if code, body := s.call("GET", "/endpoints/batched/deliveries?limit=4", nil); code != 200 || !bytes.Contains(body, []byte(first.NextCursor)) {
		t.Errorf("GET /endpoints/batched/deliveries = %d %s, want the same first page", code, body)
	}

	// Replay: the provider is asked again under a new claim, and the
	// resource's status is the new run's, never the recorded one.
	status := func() int {
		_, body := s.call("GET", "/resources/logged/r1", nil)
		var r struct {
			Status struct{ Run int } `json:"status"`
		}
		must(t, json.Unmarshal(body, &r))
		return r.Status.Run
	}
	before, runs := status(), inline.runs.Load()
	code, body := s.call("POST", fmt.Sprintf("/deliveries/%d/replay", ok.ID), nil)
	if code != 202 || !bytes.Contains(body, []byte(`"message"`)) {
		t.Fatalf("replay = %d %s", code, body)
	}
	var replayed deliveryView
	waitFor(t, 30*time.Second, "the replay's delivery in the log", func() bool {
		p := s.deliveries("kind=logged&name=r1")
		if len(p.Items) >= 2 {
			replayed = p.Items[0]
		}
		return len(p.Items) >= 2
	})
	if replayed.ID <= ok.ID || replayed.Classification != "ok" || (replayed.TaskID == ok.TaskID && replayed.ClaimEpoch == ok.ClaimEpoch) {
		t.Fatalf("replayed attempt %+v is not a new claim after %+v", replayed, ok)
	}
	if inline.runs.Load() <= runs {
		t.Fatalf("the provider was not asked again (%d runs before, %d after)", runs, inline.runs.Load())
	}
	waitFor(t, 10*time.Second, "r1's status from the replay's run", func() bool { return status() > before })
	if n := s.count(`SELECT count(*) FROM resource_events e JOIN resources r ON r.id = e.resource_id
		WHERE r.name = 'r1' AND e.type = 'delivery_replayed' AND e.message LIKE $1`, fmt.Sprintf("replayed delivery %d %%", ok.ID)); n != 1 {
		t.Errorf("%d replay events on r1, want 1", n)
	}

	// conctl reads the log and replays.
	if code, out, errOut := s.conctl("deliveries", "--endpoint", "batched", "--limit", "2"); code != 0 ||
		!strings.Contains(out, "CLASSIFICATION") || strings.Count(out, " batched ") != 2 || !strings.Contains(errOut, "--cursor") {
		t.Errorf("conctl deliveries = %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := s.conctl("deliveries", "--resource", "logged/r2", "--failed", "-o", "json"); code != 0 ||
		!json.Valid([]byte(out)) || !strings.Contains(out, `"task_error"`) {
		t.Errorf("conctl deliveries -o json = %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := s.conctl("replay", strconv.FormatInt(replayed.ID, 10)); code != 0 || !strings.Contains(out, "logged/r1: replay requested") {
		t.Errorf("conctl replay = %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := s.conctl("replay", "abc"); code != 2 || !strings.Contains(errOut, "positive integer") {
		t.Errorf("conctl replay abc = %d %s, want a usage error", code, errOut)
	}
	if code, _, errOut := s.conctl("deliveries", "--resource", "r1"); code != 2 || !strings.Contains(errOut, "KIND/NAME") {
		t.Errorf("conctl deliveries --resource r1 = %d %s, want a usage error", code, errOut)
	}

	// Refusals name the field and write nothing.
	events := s.count(`SELECT count(*) FROM resource_events`)
	defer func() {
		if n := s.count(`SELECT count(*) FROM resource_events`); n > events {
			t.Errorf("refused requests wrote %d events", n-events)
		}
	}()
	for _, tc := range []struct {
		method, path string
		code         int
		loc          string
	}{
		{"GET", "/deliveries?limit=0", 422, "query.limit"},
		{"GET", "/deliveries?classification=fine", 422, "query.classification"},
		{"GET", "/deliveries?name=r1", 422, "query.kind"},
		{"GET", "/deliveries?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", 422, "query.until"},
		{"GET", "/deliveries?until=tomorrow", 422, "query.until"},
		{"GET", "/deliveries?since=yesterday", 422, "query.since"},
		{"GET", "/deliveries?cursor=bm9wZQ", 400, "query.cursor"},
		{"GET", "/deliveries/abc", 422, "path.id"},
		{"GET", "/deliveries/999999999", 404, ""},
		{"GET", "/endpoints/nope/deliveries", 404, ""},
		{"POST", "/deliveries/abc/replay", 422, "path.id"},
		{"POST", "/deliveries/0/replay", 422, "path.id"},
		{"POST", "/deliveries/999999999/replay", 404, ""},
	} {
		code, body := s.call(tc.method, tc.path, nil)
		if !names(code, body, tc.code, tc.loc) || !strings.HasPrefix(string(body), "{") {
			t.Errorf("%s %s = %d %s, want %d naming %q", tc.method, tc.path, code, body, tc.code, tc.loc)
		}
	}
	// A resource gone: replay is meaningless.
	if code, body := s.call("DELETE", "/resources/logged/r2", nil); code != 202 {
		t.Fatalf("delete r2 = %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "r2 gone", func() bool { _, there := s.get("logged", "r2"); return !there })
	if code, body := s.call("POST", fmt.Sprintf("/deliveries/%d/replay", failed.ID), nil); !names(code, body, 409, "") {
		t.Errorf("replay of a deleted resource's delivery = %d %s, want 409", code, body)
	}

	// Retention: the periodic pass keeps each endpoint's newest keep and
	// drops the aged; the insert pruned nothing.
	total := s.count(`SELECT count(*) FROM endpoint_deliveries`)
	oldest := s.count(`SELECT min(id)::int FROM endpoint_deliveries`)
	if _, err := s.db.Pool.Exec(t.Context(), `UPDATE endpoint_deliveries SET at = at - interval '30 days' WHERE id = $1`, oldest); err != nil {
		t.Fatal(err)
	}
	rp := s.newReaper(reaper.Config{DeliveryKeep: 3, DeliveryMaxAge: 24 * time.Hour})
	must(t, rp.RunOnce(t.Context()))
	if n := s.count(`SELECT count(*) FROM endpoint_deliveries WHERE id = $1`, oldest); n != 0 {
		t.Errorf("the aged row survived the pass")
	}
	for _, ep := range []string{"sync", "async", "batched"} {
		if n := s.count(`SELECT count(*) FROM endpoint_deliveries WHERE endpoint = $1`, ep); n > 3 {
			t.Errorf("%s keeps %d rows, want at most 3", ep, n)
		}
	}
	if n := s.count(`SELECT count(*) FROM endpoint_deliveries`); n >= total || n > 9 {
		t.Errorf("%d of %d rows kept, want at most 3 per endpoint", n, total)
	}
	if p := s.deliveries("endpoint=batched"); len(p.Items) != 3 || p.Items[0].Resource.Name == "" {
		t.Errorf("batched after the prune = %+v, want its newest 3", p.Items)
	}
	s.checkInvariants()
}
