-- Completions are applied where they arrive (issue #13): complete_tasks
-- applies every outcome that does not compose in its own transaction
-- (apply_outcomes, the drain's body after its pop), so a task's outcome no
-- longer takes an outbox insert, a wake, a pop and a delete. Only the
-- outcomes that compose still go through work_outbox and the drain.
--
-- * complete_tasks and expire_async_tasks take the transient-retry backoff
--   (p_retry_base_ms, p_retry_max_ms), which the drain's caller passed
--   before: they now re-pend a failed task themselves.
-- * The outcomes_applied wake: a completion that applied outcomes tells
--   the change stream that resources moved (outbox_ready did, when every
--   outcome went through the outbox).

-- +goose Up
INSERT INTO wake_state (channel) VALUES ('outcomes_applied') ON CONFLICT DO NOTHING;
DROP FUNCTION IF EXISTS complete_tasks(uuid[], smallint[], bigint[], uuid[], jsonb[], text[], boolean[], boolean[]);
DROP FUNCTION IF EXISTS expire_async_tasks(uuid[], smallint[], bigint[], text);

-- +goose Down
-- Down forgets the engine's checksums (README.md): the next Up, of this
-- release or of the one before, applies the whole engine again.
DROP FUNCTION IF EXISTS complete_tasks(uuid[], smallint[], bigint[], uuid[], jsonb[], text[], boolean[], boolean[], int, int);
DROP FUNCTION IF EXISTS expire_async_tasks(uuid[], smallint[], bigint[], text, int, int);
DROP FUNCTION IF EXISTS apply_outcomes(work_outbox[], int, int, int, int);
DELETE FROM wake_state WHERE channel = 'outcomes_applied';
