-- The audit trail and the authors of events and spec revisions (issue #39,
-- §3).
--
-- * audit_log: one row per API request that is not a read (GET, HEAD,
--   OPTIONS), whatever its outcome, refusals included. The API appends; no
--   route updates or deletes a row; the reaper deletes the rows older than
--   AUDIT_RETENTION, which is the only delete. Pages are newest first by id
--   (ids follow insertion); each filter of GET /api/v1/audit has an index
--   ending in id, so a page reads only the rows it returns; at serves the
--   time window and the prune.
-- * resource_events.actor and resource_spec_history.author: the subject of
--   the API request whose transaction wrote the row. Their defaults read
--   converge.actor, which the store's write transactions set
--   (set_config(..., true)) from the request's context, so every insert a
--   request makes (its own, the engine functions and triggers it runs)
--   takes it without the engine passing it along; the engine's own
--   transactions never set it and store NULL, shown as "system". NULLIF: a
--   custom setting a session once set reads '' afterwards. A stable default
--   adds the column without rewriting the table; existing rows read NULL.

-- +goose Up
CREATE TABLE IF NOT EXISTS audit_log (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             timestamptz NOT NULL DEFAULT now(),
    subject        text NOT NULL,
    groups         text[] NOT NULL DEFAULT '{}',
    token_name     text,
    method         text NOT NULL,
    route          text NOT NULL,
    path           text NOT NULL,
    namespace      text NOT NULL,
    object_kind    text,
    object_name    text,
    version_before bigint,
    version_after  bigint,
    remote_addr    text,
    request_id     text NOT NULL,
    status         int NOT NULL,
    outcome        text NOT NULL CHECK (outcome IN ('ok', 'refused', 'error')),
    dry_run        boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log (at);
CREATE INDEX IF NOT EXISTS audit_log_namespace ON audit_log (namespace, id);
CREATE INDEX IF NOT EXISTS audit_log_object ON audit_log (object_kind, object_name, id);
CREATE INDEX IF NOT EXISTS audit_log_object_name ON audit_log (object_name, id);
CREATE INDEX IF NOT EXISTS audit_log_subject ON audit_log (subject, id);

ALTER TABLE resource_events ADD COLUMN IF NOT EXISTS actor text
    DEFAULT NULLIF(current_setting('converge.actor', true), '');
ALTER TABLE resource_spec_history ADD COLUMN IF NOT EXISTS author text
    DEFAULT NULLIF(current_setting('converge.actor', true), '');

-- +goose Down
ALTER TABLE resource_spec_history DROP COLUMN IF EXISTS author;
ALTER TABLE resource_events DROP COLUMN IF EXISTS actor;
DROP TABLE IF EXISTS audit_log;
