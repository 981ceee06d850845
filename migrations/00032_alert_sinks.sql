-- Alerts (issue #37, §2): the state changes an operator pages on, and the
-- sinks that carry them out (docs/operations.md "Paging on alerts").
--
-- * alert_events is the log of those changes, one row each, written in the
--   transaction of the change where the change is in the database (an
--   endpoint disabled, a resource failed terminally) and right after it
--   where it is a pod's own state (a breaker, a kind parked by readiness).
--   Its id is the dedup id every sink carries. The sink deliverer prunes
--   delivered events after a retention.
-- * alert_sinks are the operator's subscriptions: a webhook (signed as
--   provider deliveries are), an EventBridge bus, an SNS topic or an SQS
--   queue, each selecting event types and optionally kinds and endpoints.
-- * alert_outbox holds one row per (event, sink) still to deliver, written
--   with the event (emit_alert, engine/alerts.sql) as lifecycle_outbox is
--   with a transition; the sink deliverer claims rows under a lease,
--   deletes a delivered row and backs a failed one off. LOGGED: an alert
--   committed must survive a crash.

-- +goose Up
CREATE TABLE IF NOT EXISTS alert_events (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    type          text        NOT NULL CHECK (type IN ('endpoint.disabled','breaker.opened','breaker.closed','resource.failed','kind.parked')),
    endpoint      text        NOT NULL DEFAULT '',
    kind          text        NOT NULL DEFAULT '',
    kind_version  int         NOT NULL DEFAULT 0,
    resource_id   uuid,
    resource_name text        NOT NULL DEFAULT '',
    source        text        NOT NULL DEFAULT '', -- the pod that saw a pod-local change
    message       text        NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idx_alert_events_at ON alert_events (at);

CREATE TABLE IF NOT EXISTS alert_sinks (
    name        text    PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$'),
    type        text    NOT NULL CHECK (type IN ('webhook','eventbridge','sns','sqs')),
    target      text    NOT NULL, -- the URL, event bus name or ARN, topic ARN, or queue URL
    event_types text[]  NOT NULL CHECK (cardinality(event_types) > 0),
    kinds       text[]  NOT NULL DEFAULT '{}', -- empty = every kind
    endpoints   text[]  NOT NULL DEFAULT '{}', -- empty = every endpoint
    enabled     boolean NOT NULL DEFAULT true,
    secret_enc  bytea,                         -- webhook sinks: the signing secret, sealed
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS alert_outbox (
    event_id    uuid        NOT NULL REFERENCES alert_events ON DELETE CASCADE,
    sink_name   text        NOT NULL REFERENCES alert_sinks (name) ON DELETE CASCADE ON UPDATE CASCADE,
    attempts    int         NOT NULL DEFAULT 0,
    not_before  timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz,
    last_error  text,
    PRIMARY KEY (event_id, sink_name)
);
CREATE INDEX IF NOT EXISTS idx_alert_outbox_due ON alert_outbox (not_before);
CREATE INDEX IF NOT EXISTS idx_alert_outbox_sink ON alert_outbox (sink_name);

-- +goose Down
-- The engine's functions that read these tables go too; Down forgets the
-- engine's checksums (README.md), and the next Up applies it again.
DROP FUNCTION IF EXISTS emit_resource_failed_alerts(uuid[]);
DROP FUNCTION IF EXISTS emit_alert(text, text, text, int, uuid, text, text, text);
DROP TABLE IF EXISTS alert_outbox;
DROP TABLE IF EXISTS alert_sinks;
DROP TABLE IF EXISTS alert_events;
