-- The full delivery log (issue #14): endpoint_deliveries records every
-- attempt, not only failures — successes, task errors, 202 acceptances and
-- the callbacks that follow them — and the reaper prunes it by age and by
-- count per endpoint instead of the insert (control/store/deliveries.go).
--
-- * reason becomes classification: ok, task_error, accepted, callback_ok,
--   callback_error and the failure classes.
-- * failed is derived from it, so a writer cannot disagree with it; the
--   partial index behind ?failed=true holds failures only, so a success
--   costs it nothing.
-- * kind and name are the resource's when the attempt was made: the log
--   still reads after the resource is gone, and ?kind=&name= is one range
--   scan of idx_endpoint_deliveries_resource, which replaces the
--   (resource_id, id) index. task_type and action (an operation's verb)
--   say which task it was, and what a replay re-runs.
-- * The foreign key to endpoints goes: its per-row check (a FOR KEY SHARE
--   lookup) would sit on the dispatch hot path now that every attempt is
--   written, and the insert already drops rows of a deleted endpoint. A
--   deleted endpoint's rows age out with the rest.

-- +goose Up
ALTER TABLE endpoint_deliveries RENAME COLUMN reason TO classification;
ALTER TABLE endpoint_deliveries DROP CONSTRAINT IF EXISTS endpoint_deliveries_endpoint_fkey;
ALTER TABLE endpoint_deliveries
    ADD COLUMN kind      text NOT NULL DEFAULT '',
    ADD COLUMN name      text NOT NULL DEFAULT '',
    ADD COLUMN task_type text NOT NULL DEFAULT '',
    ADD COLUMN action    text NOT NULL DEFAULT '',
    ADD COLUMN failed    boolean GENERATED ALWAYS AS (classification NOT IN ('ok', 'accepted', 'callback_ok')) STORED;
UPDATE endpoint_deliveries d SET kind = r.kind, name = r.name FROM resources r WHERE r.id = d.resource_id;
DROP INDEX IF EXISTS idx_endpoint_deliveries_resource;
CREATE INDEX idx_endpoint_deliveries_resource ON endpoint_deliveries (kind, name, id);
CREATE INDEX idx_endpoint_deliveries_failed ON endpoint_deliveries (id) WHERE failed;

-- +goose Down
-- The log goes back to failures only.
DELETE FROM endpoint_deliveries WHERE NOT failed;
DELETE FROM endpoint_deliveries d WHERE NOT EXISTS (SELECT 1 FROM endpoints e WHERE e.name = d.endpoint);
DROP INDEX IF EXISTS idx_endpoint_deliveries_failed;
DROP INDEX IF EXISTS idx_endpoint_deliveries_resource;
ALTER TABLE endpoint_deliveries DROP COLUMN failed, DROP COLUMN action, DROP COLUMN task_type, DROP COLUMN name, DROP COLUMN kind;
CREATE INDEX idx_endpoint_deliveries_resource ON endpoint_deliveries (resource_id, id);
ALTER TABLE endpoint_deliveries RENAME COLUMN classification TO reason;
ALTER TABLE endpoint_deliveries ADD CONSTRAINT endpoint_deliveries_endpoint_fkey
    FOREIGN KEY (endpoint) REFERENCES endpoints ON DELETE CASCADE;
