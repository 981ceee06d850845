-- A claim's probe for a capped kind's pending tasks (claim_tasks) walked the
-- range's whole pending queue, filtering by kind: a kind with a budget but
-- nothing queued cost a scan of every other kind's backlog, per claim. On
-- the large classic BOM, five capped kinds made the probe ~4.5 ms of each
-- claim with ~5,000 tasks pending; at a million pending it would be the
-- claim. This index answers it by kind.

-- +goose Up
CREATE INDEX IF NOT EXISTS idx_work_queue_pending_kind ON work_queue (kind, kind_version, shard_id, not_before)
    WHERE state = 'pending';

-- +goose Down
DROP INDEX IF EXISTS idx_work_queue_pending_kind;
