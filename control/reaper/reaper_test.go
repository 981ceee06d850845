package reaper_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/reaper"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPassDropsExpiredIdempotencyKeys: a pass deletes the idempotency keys
// past their retention and keeps the rest.
func TestPassDropsExpiredIdempotencyKeys(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO idempotency_keys (caller, key, request, owner, lease_until, status, expires_at)
		SELECT '', 'k' || i, '', NULL, now(), 200, now() + CASE WHEN i <= 3 THEN interval '-1 minute' ELSE interval '1 hour' END
		  FROM generate_series(1, 5) i`); err != nil {
		t.Fatal(err)
	}
	r, err := reaper.New(reaper.Config{}, engine.New(db.Pool, engine.Config{}), store.New(db.Pool, store.Config{}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := db.Pool.Query(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != "k4" || left[1] != "k5" {
		t.Fatalf("keys left %v, want the two live ones (k4, k5)", left)
	}
}
