package integration

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// requestLog records when each task request reached the provider and which
// converge process sent it (the host of its callback URL).
type requestLog struct {
	mu   sync.Mutex
	at   []time.Time
	from map[string]int
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		body, _ := io.ReadAll(r.Body)
		var env webhooksdk.Envelope
		if json.Unmarshal(body, &env) == nil && env.Type == webhooksdk.EnvelopeTask && env.Callback != nil {
			host := ""
			if u, err := url.Parse(env.Callback.URL); err == nil {
				host = u.Host
			}
			l.mu.Lock()
			l.at = append(l.at, now)
			l.from[host]++
			l.mu.Unlock()
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		next.ServeHTTP(w, r)
	})
}

// BenchmarkRateLimitAccuracy measures the shared rate limit across two
// dispatch processes: two converge processes (ROLE all, dev mode, their own
// member IDs, so each claims half the shards) on one database share an
// endpoint limited to 200 requests/s, and 10,000 tasks (-short: 2,000) are
// fed at once.
// The provider timestamps every request; the figures are the achieved rate
// over the run ÷ the configured one (achieved/configured), the same less
// the initial burst (beyond_burst/configured), the busiest one-second
// window ÷ the rate (busiest_s/configured), and each process's share. docs/performance.md "Rate limits" has the figures.
//
//	go test -run '^$' -bench BenchmarkRateLimitAccuracy -benchtime 1x -timeout 10m ./integration/
func BenchmarkRateLimitAccuracy(b *testing.B) {
	const rate = 200.0
	tasks := 10000
	if testing.Short() {
		tasks = 2000
	}
	e := newEngine(b, engineOpts{noDrain: true})
	key := func() string {
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		return base64.StdEncoding.EncodeToString(k)
	}
	shared := []string{"CONVERGE_SECRET_KEY=" + key(), "CONVERGE_CALLBACK_KEY=" + key()}
	p1 := startProcess(b, e.db.DSN, processOpts{dev: true, env: append([]string{"MEMBER_ID=rate-a"}, shared...)})
	p2 := startProcess(b, e.db.DSN, processOpts{dev: true, env: append([]string{"MEMBER_ID=rate-b"}, shared...)})
	s := &server{t: b, db: e.db, base: "http://" + p1.addr, engine: e}
	m := map[string]any{"kind": "echo", "kind_version": 1, "reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}
	if code, body := s.call("PUT", "/kinds/echo/manifest", m); code != 201 {
		b.Fatalf("manifest = %d %s", code, body)
	}
	log := &requestLog{from: map[string]int{}}
	provider := &echoProvider{}
	provider.ready.Store(true)
	s.serveProviderWith("limited", endpointExtras{fields: map[string]any{"rate_limit": rate, "max_concurrency": 64}}, log.wrap, provider)

	for i := 0; b.Loop(); i++ {
		log.mu.Lock()
		log.at, log.from = nil, map[string]int{}
		log.mu.Unlock()
		b.StopTimer()
		_, err := e.db.Pool.Exec(b.Context(), `WITH r AS (INSERT INTO resources (kind, kind_version, name, spec)
			SELECT 'echo', 1, 'r' || $2::int || '-' || g, jsonb_build_object('i', g) FROM generate_series(1, $1) g RETURNING id)
			SELECT schedule_eligible(array_agg(id)) FROM r`, tasks, i)
		must(b, err)
		b.StartTimer()
		waitFor(b, 5*time.Minute, "every task delivered", func() bool {
			log.mu.Lock()
			defer log.mu.Unlock()
			return len(log.at) >= tasks
		})
		log.mu.Lock()
		at, from := log.at, log.from
		log.mu.Unlock()
		span := at[len(at)-1].Sub(at[0]).Seconds()
		busiest := 0
		for i, j := 0, 0; i < len(at); i++ {
			for j < len(at) && at[j].Sub(at[i]) < time.Second {
				j++
			}
			busiest = max(busiest, j-i)
		}
		b.ReportMetric(float64(len(at))/span/rate, "achieved/configured")
		// The bucket starts full: the first burst (= rate here) costs no
		// time. What the limiter let through beyond it is the steady rate.
		b.ReportMetric(float64(len(at)-int(rate))/span/rate, "beyond_burst/configured")
		b.ReportMetric(float64(busiest)/rate, "busiest_s/configured")
		b.ReportMetric(float64(from[p1.addr])/float64(len(at)), "share_a")
		b.ReportMetric(float64(from[p2.addr])/float64(len(at)), "share_b")
		b.Logf("%d requests in %.2f s at %.0f/s configured: %.1f/s; busiest second %d; from a %d, from b %d",
			len(at), span, rate, float64(len(at))/span, busiest, from[p1.addr], from[p2.addr])
	}
}
