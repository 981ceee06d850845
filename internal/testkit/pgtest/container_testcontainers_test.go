//go:build testcontainers

package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStartContainer runs only with -tags testcontainers. Without a Docker
// engine startContainer must answer with an error, not a panic, so New can
// fall through to its instructions.
func TestStartContainer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	dsn, stop, err := startContainer(ctx)
	if err != nil {
		t.Logf("no container (expected without Docker): %v", err)
		return
	}
	defer func() {
		if err := stop(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}
