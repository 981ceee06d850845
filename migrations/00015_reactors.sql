-- Reactors: bindings now fire. A matching transition writes one
-- lifecycle_outbox row per binding (engine/reactors.sql), and the row is
-- delivered as a 'react' task through the same claim, dispatcher and
-- completion path as work (engine/claims.sql, engine/completion.sql).
--
-- * lifecycle_outbox gains what a task carries: a task_id (stable across
--   claims, as a work task's), the claim_epoch that fences completions,
--   attempts, not_before (the retry backoff), claimed_at, last_error, and
--   snapshot: the resource as the wire shows it, taken when the row is
--   hard-deleted, so a delivery whose resource is gone still carries it.
-- * idx_lifecycle_outbox_task: completions, heartbeats and releases find a
--   react task by (shard_id, task_id) like a work task.
-- * A delivery belongs to its binding: deleting (or renaming) the binding
--   takes its undelivered rows with it.
-- * idx_reactor_bindings_transition serves the probe every emit makes first
--   (EXISTS an enabled binding on this transition).
-- * claim_tasks returns the transition and binding name of a react task:
--   its return type changes, so the old one is dropped here and the engine
--   creates the new one.

-- +goose Up
ALTER TABLE lifecycle_outbox
    ADD COLUMN task_id     uuid   NOT NULL DEFAULT gen_random_uuid(),
    ADD COLUMN claim_epoch bigint NOT NULL DEFAULT 0,
    ADD COLUMN attempts    int    NOT NULL DEFAULT 0,
    ADD COLUMN not_before  timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN claimed_at  timestamptz,
    ADD COLUMN last_error  text,
    ADD COLUMN snapshot    jsonb;
CREATE INDEX idx_lifecycle_outbox_task ON lifecycle_outbox (task_id);
ALTER TABLE lifecycle_outbox ADD CONSTRAINT lifecycle_outbox_binding_fk
    FOREIGN KEY (binding_name) REFERENCES reactor_bindings (name) ON DELETE CASCADE ON UPDATE CASCADE;
CREATE INDEX idx_reactor_bindings_transition ON reactor_bindings (transition) WHERE enabled;
DROP FUNCTION IF EXISTS claim_tasks(text, int, int, text[], int, int);

-- +goose Down
-- The claim_tasks that returns transition and binding reads the columns
-- dropped here, so it goes too; Down forgets the engine's checksums
-- (README.md), and the next Up applies the whole engine again. The emit
-- functions of engine/reactors.sql go as well: the release before this one
-- has no such file.
DROP FUNCTION IF EXISTS claim_tasks(text, int, int, text[], int, int);
DROP FUNCTION IF EXISTS emit_lifecycle(uuid[], text);
DROP INDEX IF EXISTS idx_reactor_bindings_transition;
ALTER TABLE lifecycle_outbox DROP CONSTRAINT IF EXISTS lifecycle_outbox_binding_fk;
DROP INDEX IF EXISTS idx_lifecycle_outbox_task;
ALTER TABLE lifecycle_outbox
    DROP COLUMN IF EXISTS snapshot,
    DROP COLUMN IF EXISTS last_error,
    DROP COLUMN IF EXISTS claimed_at,
    DROP COLUMN IF EXISTS not_before,
    DROP COLUMN IF EXISTS attempts,
    DROP COLUMN IF EXISTS claim_epoch,
    DROP COLUMN IF EXISTS task_id;
