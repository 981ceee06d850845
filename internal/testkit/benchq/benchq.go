// Package benchq measures Q, the baseline every engine and dispatch
// throughput figure is a ratio of: a raw loop of batched FOR UPDATE SKIP
// LOCKED claims and deletes on a table shaped like work_queue (16 range
// partitions over 256 shards, UNLOGGED, a partial pending index), with no
// engine around it. Benchmarks measure it in the same run as the figure it
// divides, because this machine's absolute rates drift.
//
// It also measures F (Floor), the design floor: the engine's own row writes
// per task as bare SQL, which bounds what the engine can reach.
package benchq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Config shapes a run. Zero fields take the defaults.
type Config struct {
	// Workers claim concurrently, each over its own contiguous shard range
	// (as dispatch pods do). Defaults to 2.
	Workers int
	// Batch is the most rows one claim takes. Defaults to 256.
	Batch int
}

const schema = `
CREATE UNLOGGED TABLE IF NOT EXISTS bench_q (
	shard_id smallint NOT NULL, id uuid NOT NULL DEFAULT gen_random_uuid(),
	state text NOT NULL DEFAULT 'pending', not_before timestamptz NOT NULL DEFAULT now(),
	claim_epoch bigint NOT NULL DEFAULT 0, claimed_by text, lease_until timestamptz,
	PRIMARY KEY (shard_id, id)) PARTITION BY RANGE (shard_id);
DO $$ BEGIN FOR i IN 0..15 LOOP
	EXECUTE format('CREATE UNLOGGED TABLE IF NOT EXISTS bench_q_p%s PARTITION OF bench_q FOR VALUES FROM (%s) TO (%s)', i, i*16, (i+1)*16);
END LOOP; END $$;
CREATE INDEX IF NOT EXISTS bench_q_pending ON bench_q (shard_id, not_before) WHERE state = 'pending';`

const (
	seedSQL = `INSERT INTO bench_q (shard_id, id)
		SELECT (hashtext(u::text) & 255)::smallint, u FROM (SELECT gen_random_uuid() u FROM generate_series(1, $1)) s`
	claimSQL = `WITH c AS (
		SELECT shard_id, id FROM bench_q
		 WHERE shard_id BETWEEN $1 AND $2 AND state = 'pending' AND not_before <= now()
		 LIMIT $3 FOR UPDATE SKIP LOCKED)
	UPDATE bench_q q SET state = 'claimed', claim_epoch = q.claim_epoch + 1, claimed_by = 'q', lease_until = now() + interval '60 seconds'
	  FROM c WHERE q.shard_id = c.shard_id AND q.id = c.id
	RETURNING q.shard_id, q.id`
	deleteSQL = `DELETE FROM bench_q q USING unnest($1::smallint[], $2::uuid[]) AS d(shard_id, id)
		WHERE q.shard_id = d.shard_id AND q.id = d.id`
)

// Run returns Q in tasks/s for n tasks. It first runs a tenth of the load
// to warm the pool's connections, as the engine's are warmed before they
// are timed, so that the ratio compares steady states.
func Run(ctx context.Context, pool *pgxpool.Pool, n int, cfg Config) (float64, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return 0, fmt.Errorf("benchq schema: %w", err)
	}
	if _, err := pool.Exec(ctx, seedSQL, max(n/10, 1)); err != nil {
		return 0, fmt.Errorf("benchq warm-up seed: %w", err)
	}
	if err := drain(ctx, pool, cfg); err != nil {
		return 0, err
	}
	if _, err := pool.Exec(ctx, seedSQL, n); err != nil {
		return 0, fmt.Errorf("benchq seed: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE bench_q`); err != nil {
		return 0, fmt.Errorf("benchq vacuum: %w", err)
	}
	start := time.Now()
	if err := drain(ctx, pool, cfg); err != nil {
		return 0, err
	}
	rate := float64(n) / time.Since(start).Seconds()
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM bench_q`).Scan(&left); err != nil {
		return 0, fmt.Errorf("benchq count: %w", err)
	}
	if left != 0 {
		return 0, fmt.Errorf("benchq left %d rows", left)
	}
	return rate, nil
}

// drain claims and deletes every row with cfg.Workers claimers.
func drain(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lo, hi := w*256/cfg.Workers, (w+1)*256/cfg.Workers-1
			if err := claimLoop(ctx, pool, lo, hi, cfg.Batch); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

func claimLoop(ctx context.Context, pool *pgxpool.Pool, lo, hi, batch int) error {
	var (
		shards []int16
		ids    []string
	)
	for {
		rows, err := pool.Query(ctx, claimSQL, lo, hi, batch)
		if err != nil {
			return fmt.Errorf("benchq claim: %w", err)
		}
		shards, ids = shards[:0], ids[:0]
		for rows.Next() {
			var (
				sh int16
				id string
			)
			if err := rows.Scan(&sh, &id); err != nil {
				rows.Close()
				return fmt.Errorf("benchq claim: %w", err)
			}
			shards, ids = append(shards, sh), append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("benchq claim: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		if _, err := pool.Exec(ctx, deleteSQL, shards, ids); err != nil {
			return fmt.Errorf("benchq delete: %w", err)
		}
	}
}
