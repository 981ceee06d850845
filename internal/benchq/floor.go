package benchq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// FloorConfig shapes a Floor run. Zero fields take the engine's defaults.
type FloorConfig struct {
	// ClaimBatch is the most tasks one claim takes. Defaults to 512, what
	// the engine benchmarks give the in-process executor.
	ClaimBatch int
	// DrainBatch is the most outcomes one drain applies. Defaults to 2000,
	// the drainer's default.
	DrainBatch int
	// Direct measures the floor of the next design step instead (issue
	// #13's "a completion applied directly where the outcome arrives"): no
	// outbox, each completion deletes its claimed row, updates the resource
	// and logs the event in one statement, and two claim loops (each on half
	// the shards) take the drain loop's place. Five row writes per task.
	Direct bool
}

// The design floor: the row writes the engine's design needs per task, on
// the engine's own tables (their indexes, triggers and persistence), as
// bare batched SQL with no engine logic around them: no plpgsql, no kind
// lookups, no requests built, no executor, no conditions. Per task: the
// queue insert, the claim, the fenced outbox insert (completion), and the
// drain's outbox delete, queue delete, resource update and the `succeeded`
// event of the leaf's phase change to Ready: seven row writes, where Q has
// two. (Until issue #13 the queue insert and the claim each logged an
// event too: nine.)
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
	// floorDirectSQL is a completion applied where it arrives: fenced by
	// the claim as the outbox insert is, then the drain's three writes.
	floorDirectSQL = `WITH w AS (
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
	floorCompleteSQL = `INSERT INTO work_outbox (shard_id, resource_id, task_id, task_type, kind, kind_version, trigger,
		claim_epoch, claimed_at, generation, emits, outcome)
	SELECT w.shard_id, w.resource_id, w.task_id, w.task_type, w.kind, w.kind_version, w.trigger,
		w.claim_epoch, w.claimed_at, w.claimed_gen, w.emits, '{"status":{"ok":true}}'
	  FROM unnest($1::smallint[], $2::uuid[], $3::bigint[]) AS i(shard_id, task_id, epoch)
	  JOIN work_queue w ON w.shard_id = i.shard_id AND w.task_id = i.task_id
	 WHERE w.claim_epoch = i.epoch AND w.state = 'claimed'
	ON CONFLICT DO NOTHING`
	// The pop is by TID, as drain_outbox_batch's is (a join by key plans
	// as a scan of the whole outbox per batch).
	floorPopSQL = `SELECT array_agg(ctid), array_agg(tableoid) FROM (
		SELECT ctid, tableoid FROM work_outbox WHERE shard_id BETWEEN 0 AND 255 LIMIT $1 FOR UPDATE SKIP LOCKED) s`
	floorDrainSQL = `WITH o AS (
		DELETE FROM work_outbox x WHERE x.shard_id BETWEEN 0 AND 255 AND x.ctid = ANY ($1::tid[])
		   AND (x.tableoid, x.ctid) IN (SELECT * FROM unnest($2::oid[], $1::tid[]))
		RETURNING x.*
	), w AS (
		DELETE FROM work_queue q USING o
		 WHERE q.shard_id = o.shard_id AND q.resource_id = o.resource_id AND q.task_type = o.task_type
		   AND q.claim_epoch = o.claim_epoch
	), r AS (
		UPDATE resources r SET status = o.outcome->'status', spec_gen = o.generation, synced_gen = o.generation,
			health_ok = true, failure_gen = 0, failure_terminal = false, last_error = NULL,
			last_task_id = o.task_id, last_task_epoch = o.claim_epoch, last_task_abandoned = o.abandoned,
			last_claimed_at = o.claimed_at, updated_at = now()
		  FROM o WHERE r.id = o.resource_id
	)
	INSERT INTO resource_events (resource_id, type, generation, message)
	SELECT o.resource_id, 'succeeded', o.generation, o.trigger FROM o`
)

// Floor returns F, the design floor in tasks/s, for n tasks on a database
// migrated with the engine's schema and with no engine duties running. It
// is timed as the engine's leaves benchmark is: the resources exist before
// the clock starts; scheduling, one claim-and-complete loop and one drain
// loop (the engine's two hot loops) are timed. Like Run, it first runs a
// tenth of the load to warm the pool's connections. F bounds what the
// engine can reach: everything the engine does beyond these writes is
// added cost.
func Floor(ctx context.Context, pool *pgxpool.Pool, n int, cfg FloorConfig) (float64, error) {
	if cfg.ClaimBatch <= 0 {
		cfg.ClaimBatch = 512
	}
	if cfg.DrainBatch <= 0 {
		cfg.DrainBatch = 2000
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
	prefix := "floor" // one database can hold a run of each design
	if cfg.Direct {
		prefix = "direct"
	}
	if _, err := round(prefix+"-warm", max(n/10, 1)); err != nil {
		return 0, err
	}
	elapsed, err := round(prefix, n)
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

// floorLoops claims and completes in one goroutine and drains in another
// until n outcomes are drained; with cfg.Direct, two goroutines claim and
// apply, each on half the shards, until n are applied.
func floorLoops(ctx context.Context, pool *pgxpool.Pool, n int, cfg FloorConfig) error {
	if cfg.Direct {
		return floorDirectLoops(ctx, pool, n, cfg)
	}
	var (
		wg              sync.WaitGroup
		claimErr, drErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for claimed := 0; claimed < n && claimErr == nil; {
			var k int
			k, claimErr = floorClaim(ctx, pool, cfg.ClaimBatch, 0, 255, floorCompleteSQL)
			claimed += k
		}
	}()
	go func() {
		defer wg.Done()
		for drained := 0; drained < n && drErr == nil; {
			var k int
			k, drErr = floorDrain(ctx, pool, cfg.DrainBatch)
			drained += k
			if k == 0 {
				time.Sleep(time.Millisecond) // the engine's drainer waits for outbox_ready here
			}
		}
	}()
	wg.Wait()
	if claimErr != nil {
		return fmt.Errorf("floor claim: %w", claimErr)
	}
	if drErr != nil {
		return fmt.Errorf("floor drain: %w", drErr)
	}
	return nil
}

// floorDirectLoops runs the two claim-and-apply loops of cfg.Direct. The
// loops stop when no task is left: each one's half holds about n/2.
func floorDirectLoops(ctx context.Context, pool *pgxpool.Pool, n int, cfg FloorConfig) error {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied int
		errs    [2]error
	)
	for w, r := range [2][2]int{{0, 127}, {128, 255}} {
		wg.Go(func() {
			for {
				k, err := floorClaim(ctx, pool, cfg.ClaimBatch, r[0], r[1], floorDirectSQL)
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
		return fmt.Errorf("floor claim and apply: %w", err)
	}
	if applied != n {
		return fmt.Errorf("floor applied %d of %d tasks", applied, n)
	}
	return nil
}

// floorClaim claims up to batch tasks in [lo, hi] and completes them with
// complete (the outbox insert, or the direct apply).
func floorClaim(ctx context.Context, pool *pgxpool.Pool, batch, lo, hi int, complete string) (int, error) {
	rows, err := pool.Query(ctx, floorClaimSQL, batch, lo, hi)
	if err != nil {
		return 0, err
	}
	var (
		shards []int16
		ids    [][16]byte
		epochs []int64
		shard  int16
		id     [16]byte
		epoch  int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&shard, &id, &epoch}, func() error {
		shards, ids, epochs = append(shards, shard), append(ids, id), append(epochs, epoch)
		return nil
	}); err != nil || len(ids) == 0 {
		return 0, err
	}
	if _, err := pool.Exec(ctx, complete, shards, ids, epochs); err != nil {
		return 0, err
	}
	return len(ids), nil
}

func floorDrain(ctx context.Context, pool *pgxpool.Pool, batch int) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var (
			tids []pgtype.TID
			tabs []uint32
		)
		if err := tx.QueryRow(ctx, floorPopSQL, batch).Scan(&tids, &tabs); err != nil || len(tids) == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, floorDrainSQL, tids, tabs)
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}
