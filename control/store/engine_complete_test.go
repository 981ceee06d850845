package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/pgtest"
)

// TestCompletionReadsOnlyClaimedRows: a completion of plain successes reads
// each claimed work row once (finish_successes deletes it; it was locked,
// then deleted: two reads), and no pending row, however deep the backlog
// beside them and whatever the queue held when its session made its plans
// (a process warms its connections at start, often on an empty queue:
// planned from such statistics, the delete scanned whole partitions).
func TestCompletionReadsOnlyClaimedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})

	// The session plans on an empty queue.
	c, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := store.WarmConn(ctx, c); err != nil {
		t.Fatal(err)
	}

	const backlog, claimed = 2000, 16
	for _, q := range []string{
		`INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`,
		`INSERT INTO resources (kind, kind_version, name) SELECT 'leaf', 1, 'r' || i FROM generate_series(1, 2000) i`, // backlog,
		`SELECT schedule_eligible(array_agg(id)) FROM resources`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tasks, err := st.Claim(ctx, store.ClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: claimed, Lease: time.Minute})
	if err != nil || len(tasks) != claimed {
		t.Fatalf("claim: %d tasks, %v", len(tasks), err)
	}
	ids, shards, epochs, rids := make([]string, claimed), make([]int16, claimed), make([]int64, claimed), make([]string, claimed)
	for i, task := range tasks {
		ids[i], shards[i], epochs[i], rids[i] = task.ID, task.Shard, task.Epoch, task.ResourceID
	}

	if _, err := c.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM complete_tasks($1::uuid[], $2, $3, $4::uuid[],
		array_fill('{"status":{"ok":true}}'::jsonb, ARRAY[$5::int]), array_fill(NULL::text, ARRAY[$5::int]),
		array_fill(false, ARRAY[$5::int]), array_fill(false, ARRAY[$5::int]), 1000, 300000)`,
		ids, shards, epochs, rids, claimed).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d of %d completions not applied", left, claimed)
	}
	var read int64
	if err := c.QueryRow(ctx, `SELECT coalesce(sum(seq_tup_read + idx_tup_fetch), 0)::bigint
		FROM pg_stat_xact_user_tables WHERE relname LIKE 'work_queue%'`).Scan(&read); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	t.Logf("completing %d claimed tasks beside %d pending read %d work rows", claimed, backlog-claimed, read)
	if read > claimed {
		t.Fatalf("completing %d claimed tasks read %d work rows, want at most %d (each claimed row once)", claimed, read, claimed)
	}
	var done int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM resources WHERE synced_gen = generation`).Scan(&done); err != nil {
		t.Fatal(err)
	}
	if done != claimed {
		t.Fatalf("%d resources synced, want %d", done, claimed)
	}
}
