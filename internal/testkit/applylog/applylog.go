// Package applylog keeps, in a test's database, every successful specChange
// outcome the engine applies, so a test can check the no-double-apply
// invariant: no (resource, generation) has two. The engine's own event log
// no longer records each task (issue #13), so the tests keep their own.
//
// It is a test tool: the trigger it installs costs a write per completion.
package applylog

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// An outcome is applied (complete_tasks, where a completion arrives, or
// the drain) only while its work row is claimed at its epoch, and applying
// a success deletes that row and records the claim on the resource
// (last_task_id, last_task_epoch, last_error NULL). The trigger fires for
// each claimed specChange row deleted, and is deferred to the commit, when
// the resource shows whether that claim's success was what deleted it.
const installSQL = `
CREATE TABLE IF NOT EXISTS test_applylog (resource_id uuid, generation bigint, task_id uuid, claim_epoch bigint);
CREATE OR REPLACE FUNCTION test_applylog() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_applylog
    SELECT r.id, OLD.claimed_gen, OLD.task_id, OLD.claim_epoch FROM resources r
     WHERE r.id = OLD.resource_id AND r.last_task_id = OLD.task_id AND r.last_task_epoch = OLD.claim_epoch
       AND r.last_error IS NULL;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS test_applylog ON work_queue;
CREATE CONSTRAINT TRIGGER test_applylog AFTER DELETE ON work_queue DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.state = 'claimed' AND OLD.trigger = 'specChange') EXECUTE FUNCTION test_applylog();`

// Install adds the log to the database pool reaches.
func Install(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, installSQL); err != nil {
		return fmt.Errorf("install the apply log: %w", err)
	}
	return nil
}

// DoubleApplied counts the (resource, generation) pairs whose specChange
// outcome was applied more than once.
func DoubleApplied(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT resource_id, generation FROM test_applylog GROUP BY 1, 2 HAVING count(*) > 1) x`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the apply log: %w", err)
	}
	return n, nil
}
