// Package applylog keeps, in a test's database, every successful specChange
// outcome the engine accepts, so a test can check the no-double-apply
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

// The trigger reads the completion's outbox insert: an outcome enters the
// outbox only while its claim holds (complete_tasks' fence), and the drain
// applies every one it pops whose work row is still claimed at that epoch.
const installSQL = `
CREATE TABLE IF NOT EXISTS test_applylog (resource_id uuid, generation bigint, task_id uuid, claim_epoch bigint);
CREATE OR REPLACE FUNCTION test_applylog() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_applylog
    SELECT resource_id, generation, task_id, claim_epoch FROM new_rows
     WHERE trigger = 'specChange' AND error IS NULL;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER test_applylog AFTER INSERT ON work_outbox
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION test_applylog();`

// Install adds the log to the database pool reaches.
func Install(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, installSQL); err != nil {
		return fmt.Errorf("install the apply log: %w", err)
	}
	return nil
}

// DoubleApplied counts the (resource, generation) pairs whose specChange
// outcome was accepted more than once.
func DoubleApplied(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT resource_id, generation FROM test_applylog GROUP BY 1, 2 HAVING count(*) > 1) x`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the apply log: %w", err)
	}
	return n, nil
}
