-- The apply split in three (issue #13): complete_tasks deletes the work rows
-- of plain successes itself (finish_successes) instead of locking them for
-- the apply to delete, so the drain's body is now apply_outcomes (the
-- composition loop), finish_work (the work rows) and apply_items (the
-- resources), which complete_tasks calls without the composition loop.
-- The new functions are the engine's (engine/completion.sql and
-- engine/drain.sql). They take or return drain_item, which 00012's Down
-- drops, so this Down drops them first.

-- +goose Up
-- Nothing to change in the schema: the engine, applied after the numbered
-- migrations, creates the functions.
SELECT 1;

-- +goose Down
-- Down forgets the engine's checksums (README.md): the next Up, of this
-- release or of the one before, applies the whole engine again.
DROP FUNCTION IF EXISTS finish_successes(uuid[], smallint[], bigint[], jsonb[], text[], boolean[], boolean[]);
DROP FUNCTION IF EXISTS finish_work(work_outbox[], uuid[], text[], int, int, int, int);
DROP FUNCTION IF EXISTS apply_items(drain_item[]);
