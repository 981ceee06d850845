-- Trace context with the work (issue #37, §3): a task carries the W3C
-- traceparent of the API request that scheduled it, so the dispatcher that
-- claims it (often on another pod) continues that request's trace.
--
-- * work_queue.traceparent: NULL unless the writing transaction set
--   converge.traceparent (set_config(..., true), which the API's store does
--   only for a traced request). The column's default reads that setting, so
--   every insert the request's transaction makes (scheduling, teardown,
--   operations) takes it without the engine passing it along; a transaction
--   that never set it (the drain, the reaper, every untraced request) stores
--   NULL. NULLIF: a custom setting a session once set reads '' afterwards.
-- * claim_tasks returns it: its return type changes, so the old one is
--   dropped here and the engine creates the new one.

-- +goose Up
ALTER TABLE work_queue ADD COLUMN traceparent text DEFAULT NULLIF(current_setting('converge.traceparent', true), '');
DROP FUNCTION IF EXISTS claim_tasks(text, int, int, text[], int, int);

-- +goose Down
-- The claim_tasks that returns traceparent reads the column dropped here, so
-- it goes too; Down forgets the engine's checksums (README.md), and the next
-- Up applies the whole engine again.
DROP FUNCTION IF EXISTS claim_tasks(text, int, int, text[], int, int);
ALTER TABLE work_queue DROP COLUMN IF EXISTS traceparent;
