-- Namespaces (issue #39, §1): resources, provider configs, reactor bindings
-- and endpoints belong to a namespace; kinds, kind configs, alert sinks and
-- cluster members stay cluster-wide.
--
-- * namespaces: the row 'default' always exists (the API refuses to delete
--   it); labels, and two optional quotas: max_objects (resources, enforced
--   by the API when one is created) and max_in_flight (claimed tasks,
--   enforced by the claims). NULL is no quota.
-- * namespace columns: NOT NULL DEFAULT 'default', so every existing row,
--   and every write that does not name one, is in 'default': an existing
--   database upgrades in place into it. Provider configs, bindings and
--   endpoints reference namespaces by a foreign key. resources does not: the
--   FOR KEY SHARE its check takes on the namespace's row made a MultiXact of
--   every concurrent creation in default (8 concurrent applies lost about
--   40% of their rate), so a creation holds its namespace with a shared
--   advisory lock instead (namespace_hold, engine/namespaces.sql), which a
--   namespace's deletion takes exclusively before counting what it holds.
-- * resources are unique by (namespace, kind, name), which replaces
--   (kind, name). The names of provider configs, reactor bindings and
--   endpoints stay unique across the plane (each is the key of a delivery
--   log, a metric, a breaker, a provider_config_ref), so their primary keys
--   do not change.
-- * a default provider config (is_default) applies to every namespace, so
--   it lives in 'default'.
-- * work_queue.namespace is the resource's, copied when a task is
--   scheduled, so the claims can share capacity between namespaces without
--   a join. No foreign key: the queue is UNLOGGED and on the hot path.
-- * endpoint_deliveries.namespace is the namespace of the delivered task's
--   resource, so the delivery log filters by namespace.
-- * schedule_applied, schedule_applied_batch and enqueue_tasks take the
--   namespace: their signatures change, so the old ones are dropped and the
--   engine creates the new ones.

-- +goose Up
CREATE TABLE IF NOT EXISTS namespaces (
    name          text        PRIMARY KEY CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    labels        jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object'),
    max_objects   int         CHECK (max_objects >= 0),
    max_in_flight int         CHECK (max_in_flight >= 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
INSERT INTO namespaces (name) VALUES ('default') ON CONFLICT DO NOTHING;

ALTER TABLE resources ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE resources DROP CONSTRAINT resources_kind_name_key;
ALTER TABLE resources ADD CONSTRAINT resources_namespace_kind_name_key UNIQUE (namespace, kind, name);

ALTER TABLE providerconfigs ADD COLUMN namespace text NOT NULL DEFAULT 'default' REFERENCES namespaces;
ALTER TABLE providerconfigs ADD CONSTRAINT providerconfigs_default_in_default CHECK (NOT is_default OR namespace = 'default');

ALTER TABLE reactor_bindings ADD COLUMN namespace text NOT NULL DEFAULT 'default' REFERENCES namespaces;

ALTER TABLE endpoints ADD COLUMN namespace text NOT NULL DEFAULT 'default' REFERENCES namespaces;

ALTER TABLE work_queue ADD COLUMN namespace text NOT NULL DEFAULT 'default';

ALTER TABLE endpoint_deliveries ADD COLUMN namespace text NOT NULL DEFAULT 'default';
CREATE INDEX idx_endpoint_deliveries_namespace ON endpoint_deliveries (namespace, id) WHERE namespace <> 'default';

DROP FUNCTION IF EXISTS schedule_applied(text, text);
DROP FUNCTION IF EXISTS schedule_applied_batch(text[], text[]);
DROP FUNCTION IF EXISTS enqueue_tasks(smallint[], uuid[], text[], smallint[], bigint[], text[]);

-- +goose Down
-- The engine's functions that read the columns dropped here go too; Down
-- forgets the engine's checksums (README.md), and the next Up applies the
-- whole engine again. A namespace other than 'default' holding a resource
-- whose (kind, name) another namespace also holds makes the old unique key
-- fail: Down refuses such a database rather than lose either.
DROP FUNCTION IF EXISTS schedule_applied(text, text, text);
DROP FUNCTION IF EXISTS schedule_applied_batch(text, text[], text[]);
DROP FUNCTION IF EXISTS enqueue_tasks(smallint[], uuid[], text[], smallint[], bigint[], text[], text[]);
DROP INDEX IF EXISTS idx_endpoint_deliveries_namespace;
ALTER TABLE endpoint_deliveries DROP COLUMN IF EXISTS namespace;
ALTER TABLE work_queue DROP COLUMN IF EXISTS namespace;
ALTER TABLE endpoints DROP COLUMN IF EXISTS namespace;
ALTER TABLE reactor_bindings DROP COLUMN IF EXISTS namespace;
ALTER TABLE providerconfigs DROP CONSTRAINT IF EXISTS providerconfigs_default_in_default;
ALTER TABLE providerconfigs DROP COLUMN IF EXISTS namespace;
ALTER TABLE resources ADD CONSTRAINT resources_kind_name_key UNIQUE (kind, name);
ALTER TABLE resources DROP CONSTRAINT IF EXISTS resources_namespace_kind_name_key;
ALTER TABLE resources DROP COLUMN IF EXISTS namespace;
DROP TABLE IF EXISTS namespaces;
