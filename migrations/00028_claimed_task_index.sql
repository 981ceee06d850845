-- Find a task by id among the claimed rows only (issue #13). Every lookup by
-- task_id is of a claim: a completion, a lease extension or release, a
-- callback's payload fence, an async expiry. The full index on task_id took
-- an entry for every scheduled row too, one of the four B-tree inserts of
-- each queue insert; a partial index on the claimed rows takes its entry at
-- the claim only (the claim's UPDATE is never HOT: it moves the row out of
-- the pending indexes).

-- +goose Up
CREATE INDEX IF NOT EXISTS idx_work_queue_claimed_task ON work_queue (task_id) WHERE state = 'claimed';
DROP INDEX IF EXISTS idx_work_queue_task;

-- +goose Down
CREATE INDEX IF NOT EXISTS idx_work_queue_task ON work_queue (task_id);
DROP INDEX IF EXISTS idx_work_queue_claimed_task;
