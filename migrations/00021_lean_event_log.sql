-- The event log records what a person reads, not every step of every task
-- (issue #13): phase transitions, failures, composition changes, deletes,
-- operator actions and quarantine. A task's schedule, claim and completion
-- times live on the task (work_queue) while it runs and on the resource
-- once applied (last_enqueued_at, last_claimed_at, updated_at), not in three
-- event rows per task.
--
-- * The `scheduled` event's trigger goes: a task entering the queue writes
--   no event. (`claimed` was written by the claim's own statement, in
--   control/store; `succeeded` by the drain, now only on a phase change.)
-- * resources.last_enqueued_at: when the last applied task was queued. Not
--   indexed, so the drain's update stays HOT; no default, so adding it
--   rewrites nothing.
-- * drain_item.enqueued_at carries it from the work row to the resource.

-- +goose Up
DROP TRIGGER IF EXISTS work_queue_scheduled ON work_queue;
DROP FUNCTION IF EXISTS work_queue_scheduled();
ALTER TABLE resources ADD COLUMN last_enqueued_at timestamptz;
ALTER TYPE drain_item ADD ATTRIBUTE enqueued_at timestamptz;

-- +goose Down
-- Down forgets the engine's checksums (README.md): the next Up, of this
-- release or of the one before, applies the whole engine again (the one
-- before re-creates the trigger).
ALTER TYPE drain_item DROP ATTRIBUTE IF EXISTS enqueued_at;
ALTER TABLE resources DROP COLUMN IF EXISTS last_enqueued_at;
