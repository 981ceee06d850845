package benchq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// FloorConfig shapes a Floor run. Zero fields take the engine's defaults.
type FloorConfig struct {
	// ClaimBatch is the most tasks one claim takes. Defaults to 512, what
	// the engine benchmarks give the in-process executor.
	ClaimBatch int
}

// The design floor: the row writes the engine's design needs per task, on
// the engine's own tables (their indexes, triggers and persistence), as
// bare batched SQL with no engine logic around them: no plpgsql, no kind
// lookups, no requests built, no executor, no conditions. Per task: the
// queue insert, the claim, and the completion applied where it arrives —
// fenced by the claim, the queue delete, the resource update and the
// `succeeded` event of the leaf's phase change to Ready: five row writes,
// where Q has two. (Until issue #13 the queue insert and the claim each
// logged an event too, and the completion went through an outbox insert
// and a drain's delete: nine.)
const (
	floorKindSQL = `INSERT INTO kind_manifest (kind, kind_version, reactions)
		VALUES ('benchfloor', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]') ON CONFLICT DO NOTHING`
	floorSeedSQL = `INSERT INTO resources (kind, kind_version, name, spec)
		SELECT 'benchfloor', 1, $1 || '-' || i, '{}' FROM generate_series(1, $2::int) i`
	floorScheduleSQL = `INSERT INTO work_queue (shard_id, resource_id, task_type, kind, kind_version, generation)
		SELECT shard_id, id, 'reconcile', kind, kind_version, generation FROM resources
		 WHERE kind = 'benchfloor' AND synced_gen < generation`
	floorClaimSQL = `WITH c AS (
		SELECT shard_id, resource_id, task_type FROM work_queue
		 WHERE shard_id BETWEEN $2 AND $3 AND state = 'pending' AND not_before <= now()
		 LIMIT $1 FOR UPDATE SKIP LOCKED
	), u AS (
		UPDATE work_queue w SET state = 'claimed', claim_epoch = w.claim_epoch + 1, claimed_by = 'floor', claim_lo = 0,
			claimed_gen = w.generation, claimed_at = now(), lease_until = now() + interval '60 seconds', deadline = now() + interval '60 seconds'
		  FROM c WHERE w.shard_id = c.shard_id AND w.resource_id = c.resource_id AND w.task_type = c.task_type
		RETURNING w.shard_id, w.task_id, w.claim_epoch
	)
	SELECT shard_id, task_id, claim_epoch FROM u`
	// floorCompleteSQL is a completion applied where it arrives: fenced by
	// the claim, then its three writes.
	floorCompleteSQL = `WITH w AS (
		DELETE FROM work_queue q USING unnest($1::smallint[], $2::uuid[], $3::bigint[]) AS i(shard_id, task_id, epoch)
		 WHERE q.shard_id = i.shard_id AND q.task_id = i.task_id AND q.claim_epoch = i.epoch AND q.state = 'claimed'
		RETURNING q.*
	), r AS (
		UPDATE resources r SET status = '{"ok":true}', spec_gen = w.claimed_gen, synced_gen = w.claimed_gen,
			health_ok = true, failure_gen = 0, failure_terminal = false, last_error = NULL,
			last_task_id = w.task_id, last_task_epoch = w.claim_epoch, last_task_abandoned = false,
			last_claimed_at = w.claimed_at, updated_at = now()
		  FROM w WHERE r.id = w.resource_id
	)
	INSERT INTO resource_events (resource_id, type, generation, message)
	SELECT w.resource_id, 'succeeded', w.claimed_gen, w.trigger FROM w`
)

// Floor returns F, the design floor in tasks/s, for n tasks on a database
// migrated with the engine's schema and with no engine duties running. It
// is timed as the engine's leaves benchmark is: the resources exist before
// the clock starts; scheduling and two claim-and-complete loops, each on
// half the shards (the engine's two hot statements, run on both cores),
// are timed. Like Run, it first runs a
// tenth of the load to warm the pool's connections. F bounds what the
// engine can reach: everything the engine does beyond these writes is
// added cost.
func Floor(ctx context.Context, pool *pgxpool.Pool, n int, cfg FloorConfig) (float64, error) {
	if cfg.ClaimBatch <= 0 {
		cfg.ClaimBatch = 512
	}
	if _, err := pool.Exec(ctx, floorKindSQL); err != nil {
		return 0, fmt.Errorf("floor kind: %w", err)
	}
	round := func(prefix string, n int) (time.Duration, error) {
		if _, err := pool.Exec(ctx, floorSeedSQL, prefix, n); err != nil {
			return 0, fmt.Errorf("floor seed: %w", err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE resources`); err != nil {
			return 0, fmt.Errorf("floor analyze: %w", err)
		}
		start := time.Now()
		if _, err := pool.Exec(ctx, floorScheduleSQL); err != nil {
			return 0, fmt.Errorf("floor schedule: %w", err)
		}
		if err := floorLoops(ctx, pool, n, cfg); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	if _, err := round("floor-warm", max(n/10, 1)); err != nil {
		return 0, err
	}
	elapsed, err := round("floor", n)
	if err != nil {
		return 0, err
	}
	var lagging, left int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM resources WHERE kind = 'benchfloor' AND synced_gen < generation),
		(SELECT count(*) FROM work_queue WHERE kind = 'benchfloor')`).Scan(&lagging, &left); err != nil {
		return 0, fmt.Errorf("floor count: %w", err)
	}
	if lagging != 0 || left != 0 {
		return 0, fmt.Errorf("floor left %d resources lagging and %d queue rows", lagging, left)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// floorLoops runs the two claim-and-complete loops. The loops stop when no
// task is left: each one's half holds about n/2.
func floorLoops(ctx context.Context, pool *pgxpool.Pool, n int, cfg FloorConfig) error {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied int
		errs    [2]error
	)
	for w, r := range [2][2]int{{0, 127}, {128, 255}} {
		wg.Go(func() {
			for {
				k, err := floorClaim(ctx, pool, cfg.ClaimBatch, r[0], r[1])
				if err != nil {
					errs[w] = err
					return
				}
				mu.Lock()
				applied += k
				mu.Unlock()
				if k == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("floor claim and complete: %w", err)
	}
	if applied != n {
		return fmt.Errorf("floor applied %d of %d tasks", applied, n)
	}
	return nil
}

// floorClaim claims up to batch tasks in [lo, hi] and completes them.
func floorClaim(ctx context.Context, pool *pgxpool.Pool, batch, lo, hi int) (int, error) {
	c, err := claimFloor(ctx, pool, batch, lo, hi)
	if err != nil || len(c.ids) == 0 {
		return 0, err
	}
	if err := c.complete(ctx, pool); err != nil {
		return 0, err
	}
	return len(c.ids), nil
}

// floorClaims are the fenced keys one floor claim returned.
type floorClaims struct {
	shards      []int16
	ids         [][16]byte
	claimEpochs []int64
}

func claimFloor(ctx context.Context, pool *pgxpool.Pool, batch, lo, hi int) (floorClaims, error) {
	var (
		c          floorClaims
		shard      int16
		id         [16]byte
		claimEpoch int64
	)
	rows, err := pool.Query(ctx, floorClaimSQL, batch, lo, hi)
	if err != nil {
		return c, err
	}
	_, err = pgx.ForEachRow(rows, []any{&shard, &id, &claimEpoch}, func() error {
		c.shards, c.ids, c.claimEpochs = append(c.shards, shard), append(c.ids, id), append(c.claimEpochs, claimEpoch)
		return nil
	})
	return c, err
}

func (c floorClaims) complete(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, floorCompleteSQL, c.shards, c.ids, c.claimEpochs)
	return err
}

// FloorStages are the floor's three statements, each summed over a serial
// run (see FloorSerial).
type FloorStages struct {
	Schedule, Claim, Complete time.Duration
}

// FloorSerial runs the floor's statements for n new tasks one after another
// on one connection: the schedule, then claims of cfg.ClaimBatch, each
// completed at once, and returns each statement's summed time. It is the
// floor's side of integration's BenchmarkEngineStages, which times the
// engine's statements the same way: with nothing running beside them, the
// two sets compare statement for statement. The resources are created (and
// vacuumed) before the clock starts, on a database where FloorSerial has not
// run yet (their names would clash).
func FloorSerial(ctx context.Context, pool *pgxpool.Pool, n int, cfg FloorConfig) (FloorStages, error) {
	var st FloorStages
	if cfg.ClaimBatch <= 0 {
		cfg.ClaimBatch = 512
	}
	if _, err := pool.Exec(ctx, floorKindSQL); err != nil {
		return st, fmt.Errorf("floor kind: %w", err)
	}
	if _, err := pool.Exec(ctx, floorSeedSQL, "floor-serial", n); err != nil {
		return st, fmt.Errorf("floor seed: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE resources`); err != nil {
		return st, fmt.Errorf("floor analyze: %w", err)
	}
	start := time.Now()
	if _, err := pool.Exec(ctx, floorScheduleSQL); err != nil {
		return st, fmt.Errorf("floor schedule: %w", err)
	}
	st.Schedule = time.Since(start)
	for done := 0; ; {
		start = time.Now()
		c, err := claimFloor(ctx, pool, cfg.ClaimBatch, 0, 255)
		st.Claim += time.Since(start)
		if err != nil {
			return st, fmt.Errorf("floor claim: %w", err)
		}
		if len(c.ids) == 0 {
			if done != n {
				return st, fmt.Errorf("floor applied %d of %d tasks", done, n)
			}
			return st, nil
		}
		start = time.Now()
		if err := c.complete(ctx, pool); err != nil {
			return st, fmt.Errorf("floor complete: %w", err)
		}
		st.Complete += time.Since(start)
		done += len(c.ids)
	}
}
