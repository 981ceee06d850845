package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/pgtest"
)

// TestCompletionReadsOnlyClaimedRows: a completion reads the claimed work
// rows it finishes and no pending row, however deep the backlog beside them
// and whatever the queue held when its session made its plans (a process
// warms its connections at start, often on an empty queue: planned from
// such statistics, a completion's statements nested-looped over every
// claimed row per input or scanned whole partitions). A plain success
// reads each row once (finish_successes deletes it; the lock-then-delete
// design read it twice); a failure's row is read by the lock, the re-pend
// and the delete beside it (finish_work), about three times.
func TestCompletionReadsOnlyClaimedRows(t *testing.T) {
	t.Parallel()
	transient := "transient"
	for _, tc := range []struct {
		name     string
		err      *string
		maxReads int // per claimed task
	}{
		{name: "successes", maxReads: 1},
		{name: "failures", err: &transient, maxReads: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const backlog, claimed = 2000, 16
			read := completionReads(t, backlog, claimed, tc.err)
			t.Logf("completing %d claimed tasks beside %d pending read %d work rows", claimed, backlog-claimed, read)
			if read > int64(tc.maxReads*claimed) {
				t.Fatalf("completing %d claimed tasks read %d work rows, want at most %d", claimed, read, tc.maxReads*claimed)
			}
		})
	}
}

// completionReads claims n of backlog leaves and completes them, each with
// errMsg (nil: a success), on a session warmed while the queue was empty;
// it returns how many work rows the completion's transaction read.
func completionReads(t *testing.T, backlog, n int, errMsg *string) int64 {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})
	c, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := store.WarmConn(ctx, c); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`,
		fmt.Sprintf(`INSERT INTO resources (kind, kind_version, name) SELECT 'leaf', 1, 'r' || i FROM generate_series(1, %d) i`, backlog),
		`SELECT schedule_eligible(array_agg(id)) FROM resources`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tasks, err := st.Claim(ctx, store.ClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: n, Lease: time.Minute})
	if err != nil || len(tasks) != n {
		t.Fatalf("claim: %d tasks, %v", len(tasks), err)
	}
	ids, shards, epochs, rids := make([]string, n), make([]int16, n), make([]int64, n), make([]string, n)
	for i, task := range tasks {
		ids[i], shards[i], epochs[i], rids[i] = task.ID, task.Shard, task.Epoch, task.ResourceID
	}

	if _, err := c.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM complete_tasks($1::uuid[], $2, $3, $4::uuid[],
		array_fill(CASE WHEN $6::text IS NULL THEN '{"status":{"ok":true}}'::jsonb END, ARRAY[$5::int]),
		array_fill($6::text, ARRAY[$5::int]), array_fill(false, ARRAY[$5::int]), array_fill(false, ARRAY[$5::int]), 1000, 300000)`,
		ids, shards, epochs, rids, n, errMsg).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d of %d completions not applied", left, n)
	}
	var read int64
	if err := c.QueryRow(ctx, `SELECT coalesce(sum(seq_tup_read + idx_tup_fetch), 0)::bigint
		FROM pg_stat_xact_user_tables WHERE relname LIKE 'work_queue%'`).Scan(&read); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	// Each completion did what it says: a success synced its resource, a
	// failure re-pended its task.
	var synced, pending int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM resources WHERE synced_gen = generation),
		(SELECT count(*) FROM work_queue WHERE state = 'pending' AND attempts = 1)`).Scan(&synced, &pending); err != nil {
		t.Fatal(err)
	}
	if errMsg == nil && synced != n || errMsg != nil && pending != n {
		t.Fatalf("after the completions: %d resources synced, %d tasks re-pended; want %d of the one the outcome asks for", synced, pending, n)
	}
	return read
}
