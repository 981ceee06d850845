package engine_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestEventPrune: the prune keeps each resource's newest events, works
// through the log in windows from its watermark, and only touches the
// shard range it is given.
func TestEventPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	eng := engine.New(db.Pool, engine.Config{})
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('k', 1, '[]')`)
	// a and b share no shard with c, so a range can hold them and not c.
	var a, b, c string
	var sa, sb, sc int
	for sc == sa || sc == sb {
		exec(`DELETE FROM resources`)
		for _, p := range []struct {
			id    *string
			shard *int
			name  string
		}{{&a, &sa, "a"}, {&b, &sb, "b"}, {&c, &sc, "c"}} {
			if err := db.Pool.QueryRow(ctx, `INSERT INTO resources (kind, kind_version, name) VALUES ('k', 1, $1)
				RETURNING id, shard_id`, p.name).Scan(p.id, p.shard); err != nil {
				t.Fatal(err)
			}
		}
	}
	logEvents := func(id string, n int) {
		exec(`INSERT INTO resource_events (resource_id, type, message) SELECT $1, 'succeeded', 'e' || i FROM generate_series(1, $2::int) i`, id, n)
	}
	const keep, window = 100, 64
	// prune runs windows from since until caught up, as the reaper does.
	prune := func(lo, hi int, since int64) int64 {
		t.Helper()
		for {
			wm, _, err := eng.EventPrune(ctx, engine.EventPruneParams{Lo: lo, Hi: hi, SinceID: since, Keep: keep, Limit: window})
			if err != nil {
				t.Fatal(err)
			}
			if since >= 0 && wm < since+window {
				return wm
			}
			since = wm
		}
	}
	left := func(id string) (n int) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM resource_events WHERE resource_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	start := prune(0, 255, engine.EventPruneFromEnd) // a fresh reaper starts at the end of the log
	logEvents(a, 150)
	logEvents(b, 20)
	all := prune(0, 255, start)
	var maxID int64
	if err := db.Pool.QueryRow(ctx, `SELECT max(id) FROM resource_events`).Scan(&maxID); err != nil {
		t.Fatal(err)
	}
	if wm, last, err := eng.EventPrune(ctx, engine.EventPruneParams{Lo: 0, Hi: 255, SinceID: all, Keep: keep, Limit: window}); err != nil || wm != maxID || last != maxID {
		t.Errorf("caught-up prune = watermark %d, last id %d, %v; want both %d", wm, last, err, maxID)
	}
	if n := left(a); n != keep {
		t.Errorf("a kept %d events, want %d", n, keep)
	}
	if got := oldestKept(t, db.Pool, a); got != "e51" {
		t.Errorf("a's oldest kept event is %q, want e51: the newest %d stay", got, keep)
	}
	if n := left(b); n != 20 {
		t.Errorf("b kept %d events, want all 20", n)
	}

	logEvents(c, 150)
	// A reaper over a and b's shards passes over c's events...
	prune(min(sa, sb), min(sa, sb), all)
	prune(max(sa, sb), max(sa, sb), all)
	if n := left(c); n != 150 {
		t.Errorf("c, outside the pruned ranges, kept %d events, want all 150", n)
	}
	// ...and the one that owns c's shard trims it.
	prune(sc, sc, all)
	if n := left(c); n != keep {
		t.Errorf("c kept %d events after its own shard's prune, want %d", n, keep)
	}
}

// oldestKept returns the message of id's oldest remaining event.
func oldestKept(t *testing.T, pool *pgxpool.Pool, id string) string {
	t.Helper()
	var m string
	if err := pool.QueryRow(context.Background(), `SELECT message FROM resource_events WHERE resource_id = $1
		ORDER BY id LIMIT 1`, id).Scan(&m); err != nil {
		t.Fatal(err)
	}
	return m
}
