package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/internal/testkit/logbuf"
)

// TestDeadlockedClaimRunsAgain: a claim PostgreSQL rolls back to break a
// deadlock is run again at once, logged at WARN (never "claim failed" at
// ERROR) and counted in converge_dispatch_claim_retries_total{reason=
// "deadlock"}; the task is delivered. The engine's lock order keeps its
// own writers from closing a cycle with a claim, so the test closes one: a
// session holds the capped kind's token row while the claim waits to
// spend it, then waits for the work row the claim picked. The claim's
// sessions check for deadlocks after 3 s and the holder's after a minute,
// so the check that finds the cycle is the claim's, and the claim is the
// one rolled back.
func TestDeadlockedClaimRunsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.WithoutCancel(e.ctx)
	e.exec(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET deadlock_timeout = %L', current_database(), '3s'); END $$`)
	e.db.Pool.Reset() // new sessions take the setting
	e.kind("leaf", model.Policy{MaxInflight: 4})
	e.exec(`INSERT INTO kind_inflight (kind, kind_version, range_lo) VALUES ('leaf', 1, 0)`)
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	e.sdk(s, nil, newProvider("leaf", echo))
	id := e.apply("leaf", "x", map[string]any{"n": 1})

	holder, err := e.db.Pool.Begin(ctx)
	must(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SET LOCAL deadlock_timeout = '1min'`)
	must(t, err)
	_, err = holder.Exec(ctx, `UPDATE kind_inflight SET in_flight = in_flight WHERE kind = 'leaf'`)
	must(t, err)

	logs := &logbuf.Buffer{}
	e.dispatcher(dispatch.Config{Logger: slog.New(slog.NewTextHandler(io.MultiWriter(tlog{t}, logs),
		&slog.HandlerOptions{Level: slog.LevelWarn}))})
	e.listen()
	waitFor(t, 10*time.Second, "the claim to wait for leaf's token row", func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%claim_tasks%'`) > 0
	})
	// Close the cycle: the claim has the task's work row.
	_, err = holder.Exec(ctx, `UPDATE work_queue SET not_before = not_before WHERE resource_id = $1`, id)
	must(t, err)
	must(t, holder.Rollback(ctx))

	e.waitPhase("leaf", "x", "Ready", 10*time.Second)
	if n := metricValue(t, e, "converge_dispatch_claim_retries_total", map[string]string{"reason": "deadlock"}); n < 1 {
		t.Errorf("converge_dispatch_claim_retries_total{reason=\"deadlock\"} = %v, want the deadlocked claim counted", n)
	}
	out := logs.String()
	if !strings.Contains(out, `level=WARN msg="claim deadlocked; claiming again"`) {
		t.Errorf("no WARN line for the deadlocked claim in the log:\n%s", out)
	}
	if strings.Contains(out, "claim failed") {
		t.Errorf("the deadlocked claim was logged as failed:\n%s", out)
	}
}
