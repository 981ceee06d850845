package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/internal/testkit/workload"
	"github.com/convergeplane/converge/webhooksdk"
)

// River's settings, each chosen so that River, not its configuration, sets
// the rate (docs/performance.md, "Peers", gives the sweep that backs them):
//
//   - NoopWorkers: the no-op peer's MaxWorkers. River gained nothing from
//     more in the sweep; the engine's leaves run at workload.LeavesConcurrency.
//   - HTTPWorkers: the HTTP peer's MaxWorkers, the engine's HTTP concurrency
//     (workload.Concurrency, the endpoint's max_concurrency), so both keep
//     as many POSTs in flight.
//   - FetchCooldown: River's producer fetches at most once per cooldown, up
//     to MaxWorkers jobs, so a client cannot exceed workers/cooldown jobs/s.
//     River's default (river.FetchCooldownDefault) makes that cap the
//     benchmark's result on a fast server; a short cooldown lifts it well
//     above what River reaches, and the benchmark warns when it does not.
//
// FetchPollInterval stays at River's default: inserts wake the producers
// through LISTEN/NOTIFY, so the poll interval does not bound the rate.
const (
	NoopWorkers   = 200
	HTTPWorkers   = workload.Concurrency
	FetchCooldown = 2 * time.Millisecond
)

// RiverConfig is one River client's settings.
type RiverConfig struct {
	// Workers is the default queue's MaxWorkers.
	Workers int
	// FetchCooldown is the client's FetchCooldown.
	FetchCooldown time.Duration
}

// FetchCap is the most jobs/s one client can start: Workers per
// FetchCooldown.
func (c RiverConfig) FetchCap() float64 { return float64(c.Workers) / c.FetchCooldown.Seconds() }

// NoopArgs is the no-op job.
type NoopArgs struct {
	I int `json:"i"`
}

// Kind is River's name for the job.
func (NoopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

// HookArgs is the HTTP job: the leaf whose envelope it posts.
type HookArgs struct {
	I int `json:"i"`
}

// Kind is River's name for the job.
func (HookArgs) Kind() string { return "hook" }

// HookWorker posts a leaf's task envelope (workload.Envelope, the engine's
// shape), signed the Standard Webhooks way with webhooksdk's signer, to a
// webhooksdk provider, and reads and decodes its answer: what the engine's
// push dispatcher does for one task, done in a River job.
type HookWorker struct {
	river.WorkerDefaults[HookArgs]
	url    string
	client *http.Client
	signer *webhooksdk.Signer
}

// NewHookWorker returns a worker posting to url, signed with secret,
// through client.
func NewHookWorker(url, secret string, client *http.Client) (*HookWorker, error) {
	s, err := webhooksdk.NewSigner(secret)
	if err != nil {
		return nil, err
	}
	return &HookWorker{url: url, client: client, signer: s}, nil
}

// Work delivers the job's envelope; an error (River retries the job) when
// the provider does not answer 200 with the task's outcome.
func (w *HookWorker) Work(ctx context.Context, job *river.Job[HookArgs]) error {
	env := workload.Envelope(job.Args.I)
	env.Attempt = job.Attempt
	body, err := json.Marshal(env)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	w.signer.SetHeaders(req.Header, "msg_"+strconv.FormatInt(job.ID, 10), time.Now(), body)
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("provider answered %d: %s", resp.StatusCode, answer)
	}
	var res webhooksdk.Result
	if err := json.Unmarshal(answer, &res); err != nil {
		return fmt.Errorf("decode the answer: %w", err)
	}
	if res.TaskID != env.TaskID || res.Outcome == nil {
		return fmt.Errorf("answer is not task %s's outcome: %s", env.TaskID, answer)
	}
	return nil
}

// RiverNoop is River working n no-op jobs on a fresh database, in jobs/s.
func RiverNoop(tb testing.TB, n int, cfg RiverConfig) float64 {
	tb.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	return runRiver(tb, n, cfg, workers, func(i int) river.JobArgs { return NoopArgs{I: i} })
}

// RiverHTTP is River working n HookWorker jobs on a fresh database, posting
// to the engine's no-op provider (workload.NewProvider) on loopback, in
// jobs/s.
func RiverHTTP(tb testing.TB, n int, cfg RiverConfig) float64 {
	tb.Helper()
	p := workload.NewProvider(tb, false)
	defer p.Close()
	// A client keeping a connection per worker alive, as the engine's
	// egress client keeps one per concurrent delivery.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = cfg.Workers
	defer tr.CloseIdleConnections()
	w, err := NewHookWorker(p.URL, p.Secret, &http.Client{Transport: tr, Timeout: 30 * time.Second})
	must(tb, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	return runRiver(tb, n, cfg, workers, func(i int) river.JobArgs { return HookArgs{I: i} })
}

// runRiver measures River on a fresh database: a started client works a
// tenth of the load first (warm connections and plans, as the engine's
// workloads warm up), then the clock starts, InsertMany inserts n jobs in
// one call and the clock stops when the last has completed, as the
// engine's clock includes scheduling its tasks and stops when the last is
// applied.
func runRiver(tb testing.TB, n int, cfg RiverConfig, workers *river.Workers, args func(int) river.JobArgs) float64 {
	tb.Helper()
	ctx := tb.Context()
	// The pool is sized and opened as the engine's benchmark pool is
	// (workload.Pool: pgtest's size, every connection opened and warmed
	// before the clock starts); engine.PoolDefaults' statement warming is
	// the engine's own and River's schema lives beside the engine's, unused.
	db := pgtest.NewWith(tb, func(c *pgxpool.Config) { c.MinConns = c.MaxConns })
	defer db.Pool.Close()
	pgtest.Warm(tb, db.Pool)
	driver := riverpgxv5.New(db.Pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	must(tb, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	must(tb, err)
	rc, err := river.NewClient(driver, &river.Config{
		Logger:        slog.New(slog.DiscardHandler),
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		Workers:       workers,
		FetchCooldown: cfg.FetchCooldown,
	})
	must(tb, err)
	must(tb, rc.Start(ctx))
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		must(tb, rc.Stop(sctx))
	}()
	params := func(count int) []river.InsertManyParams {
		ps := make([]river.InsertManyParams, count)
		for i := range ps {
			ps[i] = river.InsertManyParams{Args: args(i)}
		}
		return ps
	}
	warm := max(n/10, 1)
	_, err = rc.InsertMany(ctx, params(warm))
	must(tb, err)
	settle(tb, db.Pool, time.Now())
	ps := params(n) // built before the clock starts, as the engine's rows exist before its clock
	start := time.Now()
	_, err = rc.InsertMany(ctx, ps)
	must(tb, err)
	rate := float64(n) / settle(tb, db.Pool, start).Seconds()
	var done, failed int
	must(tb, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE errors IS NOT NULL)
		FROM river_job`).Scan(&done, &failed))
	if done != n+warm || failed != 0 {
		tb.Fatalf("River completed %d of %d jobs, %d failed at least once", done, n+warm, failed)
	}
	return rate
}

// settle waits until no job is left to work and returns the time since
// start, probing as the engine's workloads probe theirs (workload.DB.Settle).
func settle(tb testing.TB, pool *pgxpool.Pool, start time.Time) time.Duration {
	tb.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := start.Add(5 * time.Minute)
	for {
		var left bool
		must(tb, pool.QueryRow(tb.Context(), `SELECT EXISTS (SELECT 1 FROM river_job WHERE state NOT IN ('completed', 'discarded', 'cancelled'))`).Scan(&left))
		if !left {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			tb.Fatal("River's jobs did not complete within 5m")
		}
		<-tick.C
	}
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
