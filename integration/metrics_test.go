package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
)

// scrape reads the server's /metrics as a client would, into a map from
// each series as exposed (name{labels in name order}) to its value.
func (s *server) scrape() map[string]float64 {
	s.t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	must(s.t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("/metrics = %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			s.t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	must(s.t, sc.Err())
	return out
}

// TestMetricsAfterTraffic drives the whole product (a kind, resources that
// park on an unready provider, then converge through it over real HTTP, API
// reads that hit and miss) and checks black-box that /metrics shows it:
// queue depth and age per kind, deliveries, completions, the reaper's work
// (and that the drainer's and the completer's did not fail), and API
// requests by route template and status.
func TestMetricsAfterTraffic(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	if code, body := s.call("PUT", "/kinds/echo/manifest", map[string]any{"kind": "echo", "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	p := &echoProvider{}
	s.serveProvider("echo", p)
	for _, name := range []string{"m1", "m2"} {
		if code, body := s.call("POST", "/resources", map[string]any{"kind": "echo", "kind_version": 1, "name": name, "spec": map[string]any{}}); code != 201 {
			t.Fatalf("apply %s = %d %s", name, code, body)
		}
	}

	// Parked on the unready provider: the queue shows depth and a growing
	// age (the dispatcher recounts every 10s).
	const pending, oldest = `converge_dispatch_pending_tasks{kind="echo",kind_version="1"}`, `converge_dispatch_oldest_pending_seconds{kind="echo",kind_version="1"}`
	var m map[string]float64
	waitFor(t, 30*time.Second, "pending echo tasks with an age", func() bool {
		m = s.scrape()
		return m[pending] == 2 && m[oldest] > 0
	})
	if m[oldest] > 60 {
		t.Errorf("%s = %v, implausible for tasks queued seconds ago", oldest, m[oldest])
	}

	p.ready.Store(true)
	for _, name := range []string{"m1", "m2"} {
		waitFor(t, 30*time.Second, name+" Ready", func() bool {
			var d struct{ Phase string }
			_, body := s.call("GET", "/resources/echo/"+name, nil)
			return json.Unmarshal(body, &d) == nil && d.Phase == string(model.PhaseReady)
		})
	}
	if code, _ := s.call("GET", "/resources/echo/absent", nil); code != 404 {
		t.Fatalf("GET an absent resource = %d", code)
	}
	if code, _ := s.call("GET", "/no/such/route", nil); code != 404 {
		t.Fatalf("GET an unknown route = %d", code)
	}
	atLeast := map[string]float64{
		`converge_dispatch_deliveries_total{endpoint="echo",result="ok"}`:                                   2,
		`converge_dispatch_completion_duration_seconds_count`:                                               1,
		`converge_dispatch_claims_total{kind="echo",kind_version="1"}`:                                      2,
		`converge_reaper_passes_total`:                                                                      1,
		`converge_reaper_pass_duration_seconds_count`:                                                       1,
		`converge_api_requests_total{code="201",method="POST",route="/api/v1/resources"}`:                   2,
		`converge_api_requests_total{code="200",method="GET",route="/api/v1/resources/{kind}/{name}"}`:      2,
		`converge_api_requests_total{code="404",method="GET",route="/api/v1/resources/{kind}/{name}"}`:      1,
		`converge_api_requests_total{code="404",method="GET",route="unrouted"}`:                             1,
		`converge_api_requests_total{code="200",method="GET",route="/metrics"}`:                             1,
		`converge_api_request_duration_seconds_count{method="GET",route="/api/v1/resources/{kind}/{name}"}`: 3,
		// The database pool's own counters (pgxpoolprometheus).
		`pgxpool_acquire_count{pool="primary"}`: 1,
		`pgxpool_max_conns{pool="primary"}`:     1,
		`pgxpool_total_conns{pool="primary"}`:   1,
	}
	// A counter moves just after the work it counts: the dispatcher counts
	// a completion once its transaction returned, so a resource reads Ready
	// a moment before it is counted. Scrape until every series is there (or
	// the wait ends), then report the ones that are not.
	reached := func() bool {
		m = s.scrape()
		for series, least := range atLeast {
			if m[series] < least {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(10 * time.Second)
	for !reached() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for series, least := range atLeast {
		if v, ok := m[series]; !ok || v < least {
			t.Errorf("%s = %v (present %v), want at least %v", series, v, ok, least)
		}
	}
	// The build: an unstamped test binary is version "dev", on this Go.
	var builds []string
	for series, v := range m {
		if strings.HasPrefix(series, "converge_build_info{") {
			builds = append(builds, fmt.Sprintf("%s %v", series, v))
		}
	}
	if want := `converge_build_info{goversion="` + runtime.Version() + `",revision="`; len(builds) != 1 ||
		!strings.HasPrefix(builds[0], want) || !strings.HasSuffix(builds[0], `",version="dev"} 1`) {
		t.Errorf("converge_build_info series %q, want one %s...\",version=\"dev\"} at 1", builds, want)
	}
	for _, series := range []string{"converge_drainer_errors_total", "converge_dispatch_completion_errors_total", "converge_reaper_errors_total",
		"converge_reaper_reclaimed_total", "converge_reaper_requeued_total", "converge_reaper_dropped_unclaimed_total"} {
		if v, ok := m[series]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0 on a healthy run", series, v, ok)
		}
	}
	// Converged: nothing waits, so the per-kind queue series are gone.
	waitFor(t, 30*time.Second, "the echo queue series to clear", func() bool {
		m = s.scrape()
		_, p := m[pending]
		_, o := m[oldest]
		return !p && !o
	})
	for series := range m {
		if strings.HasPrefix(series, "converge_api_") && (strings.Contains(series, "m1") || strings.Contains(series, "absent") || strings.Contains(series, "no/such")) {
			t.Errorf("a raw path became a label: %s", series)
		}
	}
}
