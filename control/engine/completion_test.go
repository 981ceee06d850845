package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/engine/enginetest"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/webhooksdk"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestCompletionReadsOnlyClaimedRows: a completion reads the claimed work
// rows it finishes and no pending row, however deep the backlog beside them
// and whatever the queue held when its session made its plans (a process
// warms its connections at start, often on an empty queue: planned from
// such statistics, a completion's statements nested-looped over every
// claimed row per input or scanned whole partitions). A plain success
// reads each row once (complete_plain deletes it; the lock-then-delete
// design read it twice); a failure's row is read by the lock, the re-pend
// and the delete beside it (finish_work), about three times.
//
// The same holds for the resources: the session's plans are made on a
// handful of them, and the table grows before the measured completion (a
// bulk apply or a large composite, faster than autovacuum re-analyzes it).
// Planned on a small table, the apply's phase read and UPDATE scanned every
// resource and compared each with every id of the batch; each now reads
// its resources by key: twice per success (the lock taken before the work rows, which reads the phases
// too, and the UPDATE), three times per failure.
func TestCompletionReadsOnlyClaimedRows(t *testing.T) {
	t.Parallel()
	transient := "transient"
	for _, tc := range []struct {
		name     string
		err      *string
		maxReads int // work rows per claimed task
		maxRes   int // resources per claimed task
	}{
		{name: "successes", maxReads: 1, maxRes: 2},
		// A failure's Synced=False condition checks its foreign key too.
		{name: "failures", err: &transient, maxReads: 4, maxRes: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const backlog, claimed = 2000, 16
			work, res := completionReads(t, backlog, claimed, tc.err)
			t.Logf("completing %d claimed tasks beside %d pending read %d work rows and %d resources", claimed, backlog-claimed, work, res)
			if work > int64(tc.maxReads*claimed) {
				t.Errorf("completing %d claimed tasks read %d work rows, want at most %d", claimed, work, tc.maxReads*claimed)
			}
			if res > int64(tc.maxRes*claimed) {
				t.Errorf("completing %d claimed tasks read %d resources, want at most %d", claimed, res, tc.maxRes*claimed)
			}
		})
	}
}

// completionReads claims n of backlog leaves and completes them, each with
// errMsg (nil: a success), on a session warmed while the queue was empty
// that then completed a few tasks while resources held only a few rows; it
// returns how many work rows and resources the completion's transaction
// read.
func completionReads(t *testing.T, backlog, n int, errMsg *string) (work, res int64) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	eng := engine.New(db.Pool, engine.Config{})
	c, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := engine.WarmConn(ctx, c); err != nil {
		t.Fatal(err)
	}
	exec := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := db.Pool.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	claimAndComplete := func(prefix string, count int, errMsg *string) {
		t.Helper()
		exec(fmt.Sprintf(`INSERT INTO resources (kind, kind_version, name) SELECT 'leaf', 1, '%s' || i FROM generate_series(1, %d) i`, prefix, count),
			`SELECT schedule_eligible(array_agg(id)) FROM resources WHERE synced_gen < generation`)
		tasks, err := eng.TaskClaim(ctx, engine.TaskClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: n, Lease: time.Minute})
		if err != nil || len(tasks) != min(n, count) {
			t.Fatalf("claim: %d tasks, %v", len(tasks), err)
		}
		ids, shards, claimEpochs, rids := make([]string, len(tasks)), make([]int16, len(tasks)), make([]int64, len(tasks)), make([]string, len(tasks))
		for i, task := range tasks {
			ids[i], shards[i], claimEpochs[i], rids[i] = task.ID, task.Shard, task.ClaimEpoch, task.ResourceID
		}
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		// pg_stat_xact_user_tables holds what the session has not yet
		// reported, the previous transaction's reads included: the
		// completion's are the difference.
		var work0, res0 int64
		if err := c.QueryRow(ctx, readsSQL).Scan(&work0, &res0); err != nil {
			t.Fatal(err)
		}
		var left int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM complete_tasks($1::uuid[], $2, $3, $4::uuid[],
			array_fill(CASE WHEN $6::text IS NULL THEN '{"status":{"ok":true}}'::jsonb END, ARRAY[$5::int]),
			array_fill($6::text, ARRAY[$5::int]), array_fill(false, ARRAY[$5::int]), array_fill(false, ARRAY[$5::int]), 1000, 300000)`,
			ids, shards, claimEpochs, rids, len(tasks), errMsg).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Fatalf("%d of %d completions not applied", left, len(tasks))
		}
		if err := c.QueryRow(ctx, readsSQL).Scan(&work, &res); err != nil {
			t.Fatal(err)
		}
		work, res = work-work0, res-res0
		if _, err := c.Exec(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`)
	claimAndComplete("first", 4, nil) // the session plans its statements here
	claimAndComplete("r", backlog, errMsg)
	// Each completion did what it says: a success synced its resource, a
	// failure re-pended its task.
	var synced, pending int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM resources WHERE synced_gen = generation AND name LIKE 'r%'),
		(SELECT count(*) FROM work_queue WHERE state = 'pending' AND attempts = 1)`).Scan(&synced, &pending); err != nil {
		t.Fatal(err)
	}
	if errMsg == nil && synced != n || errMsg != nil && pending != n {
		t.Fatalf("after the completions: %d resources synced, %d tasks re-pended; want %d of the one the outcome asks for", synced, pending, n)
	}
	return work, res
}

// readsSQL sums the rows the session read from the work queue's partitions
// and from resources, not yet reported to the shared statistics.
const readsSQL = `SELECT
	coalesce(sum(seq_tup_read + idx_tup_fetch) FILTER (WHERE relname LIKE 'work_queue%'), 0)::bigint,
	coalesce(sum(seq_tup_read + idx_tup_fetch) FILTER (WHERE relname = 'resources'), 0)::bigint
	FROM pg_stat_xact_user_tables`

// TestSchedulingReadsOnlyItsResources: schedule_eligible and schedule_rollup
// read the resources they are given by key, though their session planned
// them on a handful of resources and the table has grown since (a plan kept
// from the small table scanned every resource per call and compared each
// with every id given).
func TestSchedulingReadsOnlyItsResources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, c := leafSession(t)
	// schedule calls fn on count fresh resources on the session and returns
	// how many resources that call read.
	schedule := func(fn, prefix string, count int) int64 {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`INSERT INTO resources (kind, kind_version, name)
			SELECT 'leaf', 1, '%s' || i FROM generate_series(1, %d) i`, prefix, count)); err != nil {
			t.Fatal(err)
		}
		var ids []string
		if err := db.Pool.QueryRow(ctx, `SELECT array_agg(id::text) FROM (SELECT id FROM resources WHERE name LIKE $1 || '%' LIMIT 16) x`,
			prefix).Scan(&ids); err != nil {
			t.Fatal(err)
		}
		return resourcesRead(t, c, `SELECT `+fn+`($1::uuid[])`, ids)
	}
	for _, fn := range []string{"schedule_eligible", "schedule_rollup"} {
		schedule(fn, fn+"-small-", 4) // the session plans fn here
	}
	for _, fn := range []string{"schedule_eligible", "schedule_rollup"} {
		const perID = 2
		if read := schedule(fn, fn+"-big-", 2000); read > 16*perID {
			t.Errorf("%s of 16 resources beside %d read %d resources, want at most %d", fn, 2000, read, 16*perID)
		}
	}
}

// TestRecomposeReadsOnlyItsChildren: apply_compose finds a root's children
// (the upsert's conflicts and the search for vanished ones) by key, though
// its session kept plans made while the table held only that root's family
// and the table has grown since (such a plan scanned every resource on each
// recompose).
func TestRecomposeReadsOnlyItsChildren(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, c := leafSession(t)
	var root string
	if err := db.Pool.QueryRow(ctx, `INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, 'root') RETURNING id::text`).
		Scan(&root); err != nil {
		t.Fatal(err)
	}
	const children = 4
	compose := func() int64 {
		t.Helper()
		return resourcesRead(t, c, `SELECT apply_compose($1::uuid, jsonb_build_object('children',
			(SELECT jsonb_agg(jsonb_build_object('kind', 'leaf', 'kind_version', 1, 'name', 'child-' || i))
			   FROM generate_series(1, $2::int) i)), 1)`, root, children)
	}
	// PL/pgSQL keeps a generic plan after five custom ones: the session
	// plans its recompose on the root's family alone.
	for range 8 {
		compose()
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO resources (kind, kind_version, name)
		SELECT 'leaf', 1, 'other-' || i FROM generate_series(1, 2000) i`); err != nil {
		t.Fatal(err)
	}
	// The root's lock, then per child about five: the ownership check, the
	// upsert's conflict and its re-read, the search for vanished children.
	const perChild = 8
	if read := compose(); read > 1+children*perChild {
		t.Errorf("recomposing %d children beside 2,000 other resources read %d resources, want at most %d", children, read, 1+children*perChild)
	} else {
		t.Logf("recomposing %d children beside 2,000 other resources read %d resources", children, read)
	}
}

// leafSession is a leafDB and a session of its own on it, closed when the
// test ends.
func leafSession(t *testing.T) (*pgtest.Database, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	c, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	return db, c
}

// resourcesRead runs q in a transaction of its own on c and returns how many
// resources it read.
func resourcesRead(t *testing.T, c *pgx.Conn, q string, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var w0, r0, w1, r1 int64
	if err := c.QueryRow(ctx, readsSQL).Scan(&w0, &r0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if err := c.QueryRow(ctx, readsSQL).Scan(&w1, &r1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	return r1 - r0
}

// TestCompletionRacingAnApplyDoesNotDeadlock: an apply updates a resource
// whose task is being completed, and holds the row while the completion
// arrives; then it schedules the new generation, which writes the
// resource's work row. A completion that deleted its work row before taking
// the resource's closed a cycle with it (the apply's enqueue waits for the
// uncommitted delete): PostgreSQL broke it after deadlock_timeout by
// failing the completion, which had waited first, and a completion that
// lost three times in a row left its claim to the lease. Taking the
// resource first, the completion waits for the apply, and then finds the
// new generation on the row it finishes: its outcome is applied and the
// resource runs again. A callback token need not carry the task's resource
// (the completion then passes none): the completion finds it from the work
// row, and locks it all the same.
func TestCompletionRacingAnApplyDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	for _, named := range []bool{true, false} {
		t.Run(fmt.Sprintf("resource named=%v", named), func(t *testing.T) {
			t.Parallel()
			completionRacingAnApply(t, named)
		})
	}
}

// completionRacingAnApply is TestCompletionRacingAnApplyDoesNotDeadlock,
// the completion naming its task's resource or not.
func completionRacingAnApply(t *testing.T, named bool) {
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	var id string
	if err := db.Pool.QueryRow(ctx, `INSERT INTO resources (kind, kind_version, name, spec) VALUES ('leaf', 1, 'x', '{"n": 1}')
		RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	task := enginetest.ClaimOnly(t, db, id)
	if !named {
		task.ResourceID = ""
	}

	apply, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = apply.Rollback(ctx) }()
	if _, err := apply.Exec(ctx, `UPDATE resources SET spec = '{"n": 2}', updated_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- enginetest.CompleteOne(db.Pool, task, `{"status": {"n": 1}}`) }()
	if !enginetest.WaitForLockWait(t, db, done) {
		t.Fatalf("the completion did not wait for the apply holding its resource: %v", <-done)
	}
	if _, err := apply.Exec(ctx, `SELECT schedule_applied('default', 'leaf', 'x')`); err != nil {
		t.Fatalf("the apply's scheduling: %v", err)
	}
	if err := apply.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the completion: %v", err)
	}

	var (
		status        string
		synced, gen   int64
		pending, left int
	)
	if err := db.Pool.QueryRow(ctx, `SELECT r.status::text, r.synced_gen, r.generation,
		(SELECT count(*) FROM work_queue w WHERE w.resource_id = r.id AND w.state = 'pending' AND w.generation = r.generation),
		(SELECT count(*) FROM work_queue w WHERE w.resource_id = r.id)
		FROM resources r WHERE r.id = $1`, id).Scan(&status, &synced, &gen, &pending, &left); err != nil {
		t.Fatal(err)
	}
	if status != `{"n": 1}` || synced != 1 || gen != 2 {
		t.Errorf("resource: status %s, synced_gen %d, generation %d; want the completion's status applied at generation 1 of 2", status, synced, gen)
	}
	if pending != 1 || left != 1 {
		t.Errorf("work rows: %d pending at the new generation of %d; want the one task re-pended for it", pending, left)
	}
}

// TestTaskExpireAsync: an asynchronous delivery whose lease lapsed without
// a callback is completed with a transient error, one whose lease runs is
// held, one whose callback landed is gone; a late callback for the expired
// claim is superseded. The pending counts before the claim see the tasks'
// backoff.
func TestTaskExpireAsync(t *testing.T) {
	t.Parallel()
	db := enginetest.LeafDB(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	eng := engine.New(db.Pool, engine.Config{})
	for _, n := range []string{"r1", "r2", "r3"} {
		if _, err := db.Pool.Exec(ctx, `WITH r AS (INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, $1) RETURNING id)
			SELECT schedule_eligible(array_agg(id)) FROM r`, n); err != nil {
			t.Fatal(err)
		}
	}
	// Tasks that back off are pending but not waiting: no age until one's
	// not_before passes.
	for _, tc := range []struct {
		set        string
		oldest, to float64
	}{
		{`UPDATE work_queue SET not_before = now() + interval '1 hour'`, 0, 0},
		{`UPDATE work_queue w SET not_before = now() - interval '90 seconds' FROM resources r WHERE r.id = w.resource_id AND r.name = 'r1'`, 90, 120},
	} {
		if _, err := db.Pool.Exec(ctx, tc.set); err != nil {
			t.Fatal(err)
		}
		counts, err := eng.TaskCountPending(ctx, 0, 255)
		if err != nil || len(counts) != 1 || counts[0].Kind != "leaf" || counts[0].KindVersion != 1 || counts[0].Pending != 3 {
			t.Fatalf("pending counts = %+v, %v; want leaf/1: 3", counts, err)
		}
		if o := counts[0].OldestSeconds; o < tc.oldest || o > tc.to {
			t.Errorf("after %s: oldest pending = %vs, want %v..%v", tc.set, o, tc.oldest, tc.to)
		}
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE work_queue SET not_before = now()`); err != nil {
		t.Fatal(err)
	}
	tasks, err := eng.TaskClaim(ctx, engine.TaskClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: 10, Lease: time.Minute})
	if err != nil || len(tasks) != 3 {
		t.Fatalf("claim = %d tasks, %v", len(tasks), err)
	}
	// Claimed, the tasks count as claimed, not pending.
	if counts, err := eng.TaskCountPending(ctx, 0, 255); err != nil || len(counts) != 1 || counts[0].Pending != 0 || counts[0].Claimed != 3 {
		t.Fatalf("counts after the claim = %+v, %v; want leaf/1: 0 pending, 3 claimed", counts, err)
	}
	// tasks[0]: lease lapsed, no callback -> expired. tasks[1]: lease still
	// running -> held. tasks[2]: its callback already landed -> gone.
	if _, err := db.Pool.Exec(ctx, `UPDATE work_queue SET lease_until = now() - interval '1 second' WHERE task_id = $1`, tasks[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.TaskComplete(ctx, tasks[2], webhooksdk.Result{Outcome: &webhooksdk.Outcome{}}); err != nil {
		t.Fatal(err)
	}
	got, err := eng.TaskExpireAsync(ctx, tasks, "async task timed out without a callback")
	if err != nil {
		t.Fatal(err)
	}
	if got[0].State != engine.AsyncExpired || got[1].State != engine.AsyncHeld || got[2].State != engine.AsyncGone {
		t.Fatalf("states = %+v, want expired, held, gone", got)
	}
	if time.Until(got[1].LeaseUntil) < 50*time.Second {
		t.Errorf("held lease ends in %s, want ~1m", time.Until(got[1].LeaseUntil))
	}
	// The expiry was applied: a transient failure, so the task is back to
	// pending with an attempt burnt, and the resource carries the error
	// with the claim marked abandoned.
	var errText, state string
	var abandoned bool
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(r.last_error, ''), r.last_task_abandoned, w.state, w.attempts
		FROM work_queue w JOIN resources r ON r.id = w.resource_id WHERE w.task_id = $1`, tasks[0].ID).Scan(&errText, &abandoned, &state, &attempts); err != nil {
		t.Fatal(err)
	}
	if errText != "async task timed out without a callback" || !abandoned || state != "pending" || attempts != 1 {
		t.Errorf("after the expiry: error %q, abandoned %v, task %s after %d attempts; want the message, abandoned, pending after 1",
			errText, abandoned, state, attempts)
	}
	// A late callback for the expired claim is never a second outcome; nor
	// is it a duplicate: its Result was not applied, the dispatcher's expiry
	// was. It is superseded.
	if st, err := eng.TaskComplete(ctx, tasks[0], webhooksdk.Result{Outcome: &webhooksdk.Outcome{}}); !errors.Is(err, engine.ErrSuperseded) || st != engine.Superseded {
		t.Errorf("late callback = %q, %v; want superseded", st, err)
	}
	// The callback that landed before is the provider's own: its repeat is
	// a duplicate.
	if st, err := eng.TaskComplete(ctx, tasks[2], webhooksdk.Result{Outcome: &webhooksdk.Outcome{}}); err != nil || st != engine.Duplicate {
		t.Errorf("repeated callback = %q, %v; want duplicate", st, err)
	}
}

// TestComposedChildSpecIsChecked: a composer's child whose spec its kind's
// schema refuses fails the composer's task terminally, naming the child,
// and nothing is composed; a child of a kind the pod's kind cache does not
// hold passes the check (the drain's foreign key refuses a kind that does
// not exist). The engine checks through the kind cache, as a converge
// process wires it.
func TestComposedChildSpecIsChecked(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := enginetest.LeafDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO kind_manifest (kind, kind_version, reactions, spec_schema) VALUES
		('comp', 1, '[{"name":"compose","trigger":"specChange","emits":["children","status"]}]', NULL),
		('net', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]', '{"type":"object","required":["cidr"]}')`); err != nil {
		t.Fatal(err)
	}
	kinds := store.NewKindCache(store.New(db.Pool, store.Config{}), store.KindCacheConfig{}, nil)
	if err := kinds.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	eng := engine.New(db.Pool, engine.Config{SpecCheck: kinds.CheckComposedSpec})
	compose := func(name string, child webhooksdk.Child) {
		t.Helper()
		var id string
		if err := db.Pool.QueryRow(ctx, `INSERT INTO resources (kind, kind_version, name) VALUES ('comp', 1, $1) RETURNING id::text`,
			name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		task := enginetest.ClaimOnly(t, db, id)
		res := webhooksdk.Result{Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{}`), Children: []webhooksdk.Child{child}}}
		if st, err := eng.TaskComplete(ctx, task, res); err != nil || st != engine.Applied {
			t.Fatalf("%s's completion = %v, %v; want applied", name, st, err)
		}
	}

	compose("refused", webhooksdk.Child{Kind: "net", KindVersion: 1, Name: "a", Spec: json.RawMessage(`{}`)})
	var terminal bool
	var lastError string
	if err := db.Pool.QueryRow(ctx, `SELECT failure_terminal, coalesce(last_error, '') FROM resources WHERE name = 'refused'`).
		Scan(&terminal, &lastError); err != nil {
		t.Fatal(err)
	}
	if !terminal || !strings.Contains(lastError, "children[0] (net/a)") {
		t.Errorf("a child its schema refuses: terminal %v, last error %q; want a terminal failure naming children[0] (net/a)", terminal, lastError)
	}

	compose("unknown", webhooksdk.Child{Kind: "ghost", KindVersion: 1, Name: "b", Spec: json.RawMessage(`{}`)})
	var queued int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM work_outbox o JOIN resources r ON r.id = o.resource_id
		WHERE r.name = 'unknown'`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if queued != 1 {
		t.Errorf("a child of a kind the cache does not hold: %d outcomes queued for the drain, want its composition", queued)
	}
}
