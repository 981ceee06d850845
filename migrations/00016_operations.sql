-- Operator verbs and spec history (issue #11 items 5 and 6).
--
-- * resource_operations: one row per verb invoked on a resource through the
--   API. The op is the truth; its operate task in the UNLOGGED work_queue
--   (task_id = the op's id, one per resource at a time) is rebuilt by the
--   reaper after a crash. Functions in engine/operations.sql.
-- * resource_spec_history: the specs a root resource was applied with,
--   numbered per resource and bounded by the API's apply (newest N kept).
--   Composed children write none.

-- +goose Up
CREATE TABLE resource_operations (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    resource_id uuid        NOT NULL REFERENCES resources ON DELETE CASCADE,
    verb        text        NOT NULL,
    input       jsonb       NOT NULL DEFAULT '{}',
    state       text        NOT NULL DEFAULT 'pending'
                            CHECK (state IN ('pending','running','succeeded','failed','cancelled')),
    output      jsonb,
    error       text,
    attempts    int         NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX idx_resource_operations_resource ON resource_operations (resource_id, created_at);
-- The reaper's probe for live ops that lost their task: empty when idle.
CREATE INDEX idx_resource_operations_live ON resource_operations (updated_at) WHERE state IN ('pending','running');

CREATE TABLE resource_spec_history (
    resource_id  uuid        NOT NULL REFERENCES resources ON DELETE CASCADE,
    revision     bigint      NOT NULL CHECK (revision >= 1),
    generation   bigint      NOT NULL,
    kind_version smallint    NOT NULL,
    spec         jsonb       NOT NULL,
    labels       jsonb       NOT NULL DEFAULT '{}',
    applied_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, revision)
);

-- +goose Down
-- The engine's operation functions read the tables dropped here, so they go
-- too; Down forgets the engine's checksums (README.md), and the next Up
-- applies the engine whose drain no longer calls them.
DROP FUNCTION IF EXISTS enqueue_operations(uuid[]), finish_operations(drain_item[]),
    cancel_operation(uuid), requeue_operations(int, int, int, int);
DROP TABLE IF EXISTS resource_spec_history;
DROP TABLE IF EXISTS resource_operations;
