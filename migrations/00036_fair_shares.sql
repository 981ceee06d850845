-- Fair shares between namespaces (issue #39, §4): claims share each batch
-- between the namespaces with claimable work, a namespace's max_in_flight
-- holds across every claimer, and a claimer may serve a pair for one
-- namespace only (namespaced endpoints).
--
-- * idx_work_queue_pending_ns replaces idx_work_queue_pending_kind (00022):
--   the same columns with namespace first. A claim's per-namespace picks
--   read it by namespace (every pending task of a namespace) and by
--   (namespace, kind, kind_version) (a capped kind's tasks of a namespace);
--   with only the default namespace the capped-kind probe reads it under
--   namespace = 'default', as it read the old index. One index for the
--   other: scheduling writes no more index entries than before.
-- * namespace_inflight counts the claimed tasks of namespaces with a
--   max_in_flight, as kind_inflight counts capped kinds': one partial per
--   claimer range (range_lo), UNLOGGED (recount_inflight rebuilds it).
-- * claim_tasks takes the pairs the namespaces serve themselves (p_own) and
--   returns each task's namespace; finish_successes returns the namespaces
--   inflight_release gives tokens back to, and inflight_release takes them:
--   their signatures change, so the old ones are dropped here and the
--   engine creates the new ones.

-- +goose Up
CREATE INDEX IF NOT EXISTS idx_work_queue_pending_ns ON work_queue (namespace, kind, kind_version, shard_id, not_before)
    WHERE state = 'pending';
DROP INDEX IF EXISTS idx_work_queue_pending_kind;
CREATE UNLOGGED TABLE IF NOT EXISTS namespace_inflight (
    namespace text     NOT NULL,
    range_lo  smallint NOT NULL,
    in_flight int      NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, range_lo)
);
DROP FUNCTION IF EXISTS claim_tasks(text, int, int, text[], int, int);
DROP FUNCTION IF EXISTS finish_successes(uuid[], smallint[], bigint[], jsonb[], text[], boolean[], boolean[]);
DROP FUNCTION IF EXISTS inflight_release(text[], smallint[], smallint[]);

-- +goose Down
-- The engine's functions of this migration read what it adds, so they go
-- too; Down forgets the engine's checksums (README.md), and the next Up
-- applies the whole engine again.
DROP FUNCTION IF EXISTS claim_tasks(text, int, int, text[], text[], int, int);
DROP FUNCTION IF EXISTS finish_successes(uuid[], smallint[], bigint[], jsonb[], text[], boolean[], boolean[]);
DROP FUNCTION IF EXISTS inflight_release(text[], smallint[], smallint[], text[]);
DROP TABLE IF EXISTS namespace_inflight;
CREATE INDEX IF NOT EXISTS idx_work_queue_pending_kind ON work_queue (kind, kind_version, shard_id, not_before)
    WHERE state = 'pending';
DROP INDEX IF EXISTS idx_work_queue_pending_ns;
