-- Cheaper writes for composites (issue #15, the classic demo's large BOM).
--
-- * idx_resources_failed's predicate no longer mentions generation. An index
--   predicate's columns count as indexed for HOT, so every generation bump
--   (a spec change, and above all a value flow filling a dependent's spec)
--   was a non-HOT update that wrote a new entry into each of resources'
--   eight indexes, the labels GIN among them. failure_gen > 0 holds for
--   every Failed resource (failure_gen = generation >= 1); the list's
--   failure filter states it so the planner can still use the index.
--   Measured on the large BOM: the value-flow UPDATE went from 1,055 ms to
--   456 ms for its 5,350 rows.
-- * work_outbox.outcome is compressed with lz4 where the server has it: a
--   composer's outcome is megabytes (the large BOM's is 2.4 MB), and pglz
--   spent about 110 ms compressing it on the completion's insert, on the
--   path before any child can start. A server built without lz4 keeps pglz.

-- +goose Up
DROP INDEX IF EXISTS idx_resources_failed;
CREATE INDEX idx_resources_failed ON resources (shard_id) WHERE failure_gen > 0;

-- +goose StatementBegin
DO $$
BEGIN
    ALTER TABLE work_outbox ALTER COLUMN outcome SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server has no lz4: work_outbox.outcome keeps the default compression';
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE work_outbox ALTER COLUMN outcome SET COMPRESSION default;
DROP INDEX IF EXISTS idx_resources_failed;
CREATE INDEX idx_resources_failed ON resources (shard_id) WHERE failure_gen = generation;
