package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/convergeplane/converge/internal/testkit/logbuf"
	"github.com/convergeplane/converge/internal/testkit/testnet"
)

// BenchmarkScale is issue #13's million: SCALE_N leaf resources (make
// bench-scale: 1,000,000) created through POST /resources:batch and
// converged through HTTP dispatch to a no-op webhooksdk provider with
// batched deliveries (SCALE_MAX_BATCH, default 32), by a real `converge dev`
// process on the benchmark's database (ROLE all), so its peak RSS is its
// own. It prints the wall time,
// resources/s, the converge process's peak RSS (VmHWM), the database's
// size, and when each 100k was created and converged.
//
// The creation and the convergence overlap: each batch chunk commits on its
// own, and the dispatcher claims while the next ones are written. A
// resource's convergence time is its updated_at (the drain's write; a leaf
// is written once after its create), taken from the database afterwards,
// so polling costs the run nothing but a probe every 2 s.
//
// Skipped unless SCALE_N is set: `make bench` runs every benchmark.
func BenchmarkScale(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("SCALE_N"))
	if n <= 0 {
		b.Skip("set SCALE_N (make bench-scale runs 1,000,000)")
	}
	maxBatch := 32
	if v, err := strconv.Atoi(os.Getenv("SCALE_MAX_BATCH")); err == nil && v > 0 {
		maxBatch = v
	}
	for range b.N {
		benchScale(b, n, maxBatch)
	}
}

func benchScale(b *testing.B, n, maxBatch int) {
	e := newEngine(b, engineOpts{noDrain: true})
	bin := filepath.Join(b.TempDir(), "converge")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/converge").CombinedOutput(); err != nil {
		b.Fatalf("build converge: %v\n%s", err, out)
	}
	addr, health := testnet.FreeAddr(b), testnet.FreeAddr(b)
	key := func(n int) string {
		k := make([]byte, n)
		_, _ = rand.Read(k)
		return base64.StdEncoding.EncodeToString(k)
	}
	// `converge dev` on the test's database: production settings but for
	// plain http to loopback providers.
	cmd := exec.Command(bin, "dev")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+e.db.DSN, "LISTEN_ADDR="+addr, "HEALTH_ADDR="+health,
		"CONVERGE_DATA_DIR="+b.TempDir(), "CONVERGE_SECRET_KEY="+key(32), "CONVERGE_CALLBACK_KEY="+key(32), "LOG_LEVEL=warn")
	var logs logbuf.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	must(b, cmd.Start())
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if b.Failed() {
			b.Logf("converge output:\n%s", logs.String())
		}
	})
	s := &server{t: b, db: e.db, base: "http://" + addr, engine: e}
	waitFor(b, 60*time.Second, "converge to serve", func() bool {
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	if code, body := s.call("PUT", "/kinds/leaf/manifest", map[string]any{"kind": "leaf", "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
		b.Fatalf("leaf manifest = %d %s", code, body)
	}
	fields := map[string]any{"max_concurrency": 64}
	if maxBatch > 1 {
		fields["max_batch"] = maxBatch
	}
	s.serveProviderWith("leaves", endpointExtras{fields: fields}, nil, &bigProvider{kind: "leaf"})
	s.waitEndpointReady("leaves")

	// Two writers, 1,000 resources a request (conctl's chunk), as NDJSON. A
	// 503 (the request's deadline passed on a loaded machine; the chunks it
	// committed come back unchanged) is sent again, as a client should.
	const chunk, writers = 1000, 2
	start := time.Now()
	ctx := b.Context()
	g, gctx := errgroup.WithContext(ctx)
	var mu sync.Mutex
	created := make([]time.Duration, 0, n/chunk+1)
	for w := range writers {
		g.Go(func() error {
			for lo := w * chunk; lo < n; lo += writers * chunk {
				var body bytes.Buffer
				for i := lo; i < min(lo+chunk, n); i++ {
					fmt.Fprintf(&body, `{"kind":"leaf","kind_version":1,"name":"l-%d","spec":{"i":%d}}`+"\n", i, i)
				}
				written := 0
				for attempt := 0; ; attempt++ {
					req, err := http.NewRequestWithContext(gctx, http.MethodPost, s.base+"/api/v1/resources:batch", bytes.NewReader(body.Bytes()))
					if err != nil {
						return err
					}
					req.Header.Set("Content-Type", "application/x-ndjson")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						return err
					}
					var res struct{ Created, Unchanged, Invalid int }
					err = json.NewDecoder(resp.Body).Decode(&res)
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable && attempt < 5 {
						time.Sleep(time.Second)
						continue
					}
					written = res.Created + res.Unchanged
					if err != nil || resp.StatusCode != http.StatusOK || res.Invalid != 0 || written != min(chunk, n-lo) {
						return fmt.Errorf("batch at %d = %d (%+v, %v)", lo, resp.StatusCode, res, err)
					}
					break
				}
				mu.Lock()
				created = append(created, time.Since(start))
				mu.Unlock()
			}
			return nil
		})
	}
	must(b, g.Wait())
	createdIn := time.Since(start)
	waitFor(b, 2*time.Hour, "every resource converged", func() bool {
		time.Sleep(2 * time.Second)
		var busy bool
		must(b, e.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM work_queue) OR EXISTS (SELECT 1 FROM work_outbox)`).Scan(&busy))
		return !busy
	})
	rss := peakRSS(b, cmd.Process.Pid)

	var (
		ready  int
		first  time.Time
		dbSize int64
		per    []float64
	)
	must(b, e.db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE phase = 'Ready'), min(created_at), pg_database_size(current_database())
		FROM resources WHERE kind = 'leaf'`).Scan(&ready, &first, &dbSize))
	if ready != n {
		b.Fatalf("%d of %d leaves Ready", ready, n)
	}
	// The time each 100k had converged, from the drain's writes, in one
	// sort of the leaves (ten OFFSET scans, one per tenth, sorted the
	// million ten times, and twice returned no row for the last tenth).
	step := max(n/10, 1)
	must(b, e.db.Pool.QueryRow(ctx, `SELECT array_agg(extract(epoch FROM updated_at - $2::timestamptz) ORDER BY rn) FROM (
		SELECT updated_at, row_number() OVER (ORDER BY updated_at) rn FROM resources WHERE kind = 'leaf') x
		WHERE rn % $1 = 0`, step, first).Scan(&per))
	if len(per) != n/step {
		b.Fatalf("convergence times for %d tenths of %d leaves, want %d", len(per), n, n/step)
	}
	last := time.Duration(per[len(per)-1] * float64(time.Second))
	wall := max(last, createdIn)
	b.ReportMetric(float64(n)/wall.Seconds(), "resources/s")
	b.ReportMetric(float64(rss)/(1<<20), "peak_rss_MiB")
	fmt.Printf("scale: %d leaves, max_batch %d: created in %.1f s, all converged %.1f s after the first create: %.0f resources/s\n",
		n, maxBatch, createdIn.Seconds(), wall.Seconds(), float64(n)/wall.Seconds())
	fmt.Printf("scale: converge peak RSS %.0f MiB, database %.0f MiB\n", float64(rss)/(1<<20), float64(dbSize)/(1<<20))
	var line strings.Builder
	for i, t := range per {
		c := created[min(max((i+1)*step/chunk, 1), len(created))-1]
		fmt.Fprintf(&line, "  %dk: created %.1f s, converged %.1f s\n", (i+1)*step/1000, c.Seconds(), t)
	}
	fmt.Print("scale: per tenth of the run (cumulative)\n" + line.String())
}

// peakRSS reads a process's peak resident set (VmHWM) from /proc, in bytes.
func peakRSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(tb, err)
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			must(tb, err)
			return kb << 10
		}
	}
	tb.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
