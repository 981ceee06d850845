package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/inproc"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestInprocCompletesPastAStuckWrite: while one completion batch's write is
// held up in the database, the in-process executor writes the next batch
// beside it (inproc.Config.Writers), rather than every later result waiting
// for the stuck one.
func TestInprocCompletesPastAStuckWrite(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{})
	e.manifest("leaf", 1, leafReactions, model.Policy{})
	started, proceed := make(chan struct{}), make(chan struct{})
	e.run(inproc.Config{}, map[string]inproc.Handler{"leaf/1": inproc.HandlerFunc(
		func(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
			if req.Resource.Name == "stuck" {
				close(started)
				<-proceed
			}
			return webhooksdk.Outcome{Status: json.RawMessage(`{}`)}, nil
		})})
	e.listen()
	ctx := t.Context()

	stuck := e.apply("leaf", "stuck", map[string]any{})
	<-started
	// Hold the stuck task's queue row, which its completion must lock, then
	// let its handler answer: its batch's write waits on the lock.
	tx, err := e.db.Pool.Begin(ctx)
	must(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM work_queue WHERE resource_id = $1 FOR UPDATE`, stuck)
	must(t, err)
	close(proceed)
	waitFor(t, 10*time.Second, "the stuck completion to wait on its lock", func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%complete_tasks%'`) == 1
	})

	e.apply("leaf", "next", map[string]any{})
	e.waitPhase("leaf", "next", "Ready", 10*time.Second)
	must(t, tx.Rollback(ctx))
	e.waitPhase("leaf", "stuck", "Ready", 10*time.Second)
	e.checkInvariants()
}
