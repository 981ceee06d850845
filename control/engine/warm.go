package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// WarmConn readies a new connection for the engine's hot paths: it loads
// the catalogs of the tables claims and completions touch and plans what
// it can of them (warm_session, migrations/engine/warm.sql). On a fresh
// backend that work is many times a task's own cost, and the first tasks
// through the connection would otherwise wait on it.
func WarmConn(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "SELECT warm_session()"); err != nil {
		return fmt.Errorf("warm session: %w", err)
	}
	return nil
}

// PoolDefaults configures the pool of a converge process (after the
// database is migrated: it calls the engine). Every new connection is
// warmed (WarmConn; a failure is logged, and the connection served cold);
// unless the connection string sets pool_max_conns the pool has at least
// PoolSizeMin connections; and unless it sets pool_min_conns the pool
// keeps all MaxConns connections open, so connections are opened and
// warmed in the background, at start and when one is recycled, rather
// than on a task's path.
func PoolDefaults(cfg *pgxpool.Config, log *slog.Logger) {
	prev := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if prev != nil {
			if err := prev(ctx, conn); err != nil {
				return err
			}
		}
		if err := WarmConn(ctx, conn); err != nil {
			log.Warn("new database connection not warmed", "err", err)
		}
		return nil
	}
	if !strings.Contains(cfg.ConnString(), "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, PoolSizeMin)
	}
	if !strings.Contains(cfg.ConnString(), "pool_min_conns") {
		cfg.MinConns = cfg.MaxConns
	}
}

// PoolSizeMin is the smallest pool PoolDefaults leaves a process with
// when the connection string sets no pool_max_conns: about as many
// connections as a member's engine duties hold at once (two LISTENs, the
// claim loop, two completion writes and the delivery-log inserts beside
// them, the lease heartbeat, the async watch, the drainer, the reaper).
// pgx sizes a pool by the process's CPUs, at least 4: on a small member
// the duties queued for its connections, which capped the statements the
// member ran on the database at once, whatever the database's cores.
const PoolSizeMin = 12
