-- Abandoned completions: a failure the dispatcher records in the provider's
-- place (the request timed out, the connection failed, the task deadline
-- passed before an answer, an accepted task's callback never came, ...) is
-- marked, so that the provider's own Result for that claim, arriving later
-- by callback, is answered 'superseded' (409: discarded) and not
-- 'duplicate' (200: as if it had been applied). See complete_tasks
-- (engine/completion.sql) and drain_outbox_batch (engine/drain.sql).
--
-- * work_outbox.abandoned: the mark, from the completion to the drain.
-- * resources.last_task_abandoned: the mark of the outcome last applied,
--   next to last_task_id/last_task_epoch, which recognise a repeat once the
--   drain has finished the task. Not indexed, so the drain's update stays
--   HOT; a constant default, so adding it rewrites nothing.
-- * drain_item.abandoned: carries it through the drain.
-- * complete_tasks takes the marks as an eighth argument: the old
--   signature is dropped here and the engine creates the new one.

-- +goose Up
ALTER TABLE work_outbox ADD COLUMN abandoned boolean NOT NULL DEFAULT false;
ALTER TABLE resources ADD COLUMN last_task_abandoned boolean NOT NULL DEFAULT false;
ALTER TYPE drain_item ADD ATTRIBUTE abandoned boolean;
DROP FUNCTION IF EXISTS complete_tasks(uuid[], smallint[], bigint[], uuid[], jsonb[], text[], boolean[]);

-- +goose Down
-- The eight-argument complete_tasks reads the columns dropped here, so it goes
-- too. Down forgets the engine's checksums (README.md): the next Up, of this
-- release or of the one before, applies the whole engine again and defines
-- the complete_tasks it calls.
DROP FUNCTION IF EXISTS complete_tasks(uuid[], smallint[], bigint[], uuid[], jsonb[], text[], boolean[], boolean[]);
ALTER TYPE drain_item DROP ATTRIBUTE IF EXISTS abandoned;
ALTER TABLE resources DROP COLUMN IF EXISTS last_task_abandoned;
ALTER TABLE work_outbox DROP COLUMN IF EXISTS abandoned;
