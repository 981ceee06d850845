-- The engine's home: the schema as DDL only, and every plpgsql function in
-- migrations/engine/ (one file per concern, CREATE OR REPLACE, applied after
-- the numbered migrations whenever its checksum changes; see README.md).
--
-- This migration collapses the released history, 00001_core.sql through
-- 00011_cluster_notify_on_change.sql, into the schema it built. It is
-- written idempotently, so it serves both kinds of database:
--
-- * an empty one: it builds every table, index, partition and type;
-- * one at 00011 (the last release before the collapse; migrations.Up
--   refuses one applied only part of the way there): every CREATE ... IF
--   NOT EXISTS finds its object, and only these change:
--     - kind_manifest loses the CHECK kind_manifest_legal, which called the
--       plpgsql validate_kind_manifest; the engine's BEFORE trigger of the
--       same name refuses the same rows with the same SQLSTATE (23514),
--       constraint name and message (engine/kinds.sql);
--     - converge_engine_checksums is new;
--     - drain_item and resources_provider_config_fk are dropped and
--       recreated identically (neither has an IF NOT EXISTS);
--     - the functions are replaced by the engine's, which hold the same
--       text (migrations_test.go checks an upgraded database against a
--       fresh one).
--
-- The released files are kept, byte for byte, in
-- testdata/released-00011.tar.gz for that test.
--
-- shard_of, outcome_bit and reaction_mask stay here, with the tables: they
-- compute stored generated columns, and replacing one in place would not
-- recompute the values stored with the old one. They are SQL, not plpgsql.
-- Changing one means a new column (or a rewrite) in a numbered migration.

-- +goose Up

-- shard_of maps a resource id onto the fixed 256-shard axis. hashtext is stable
-- across PostgreSQL versions for a given input; & 255 keeps it non-negative.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION shard_of(id uuid) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (hashtext(id::text) & 255)::smallint
$$;
-- +goose StatementEnd

-- Outcome mask bits, shared with control/model (OutcomeMask).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outcome_bit(part text) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE part
        WHEN 'children' THEN 1 WHEN 'edges' THEN 2 WHEN 'configs' THEN 4
        WHEN 'status' THEN 8 WHEN 'conditions' THEN 16 WHEN 'finalizer' THEN 32
        WHEN 'operationOutput' THEN 64 WHEN 'sideEffect' THEN 128
    END
$$;
-- +goose StatementEnd

-- reaction_mask is the emits mask of one reaction: the OR of its outcome bits.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION reaction_mask(r jsonb) RETURNS int
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(bit_or(outcome_bit(e)), 0)::int FROM jsonb_array_elements_text(r->'emits') e
$$;
-- +goose StatementEnd

-- Kinds ----------------------------------------------------------------------

-- A kind's manifest. Its reactions are held to the legality rules by the
-- engine's kind_manifest_legal trigger (engine/kinds.sql), which also seeds
-- kind_config and wakes the manifest caches.
CREATE TABLE IF NOT EXISTS kind_manifest (
    kind            text     NOT NULL CHECK (kind ~ '^[a-z][a-z0-9-]{0,62}$'),
    kind_version    smallint NOT NULL CHECK (kind_version BETWEEN 1 AND 32767),
    description     text     NOT NULL DEFAULT '',
    spec_schema     jsonb,
    status_schema   jsonb,
    config_schema   jsonb,
    reactions       jsonb    NOT NULL DEFAULT '[]',
    finalizer_name  text     NOT NULL DEFAULT '',
    policy          jsonb    NOT NULL DEFAULT '{}',
    -- Derived from reactions so the claim path reads columns, not JSON.
    spec_reaction    text GENERATED ALWAYS AS (jsonb_path_query_first(reactions, '$[*] ? (@.trigger == "specChange")') ->> 'name') STORED,
    rollup_reaction  text GENERATED ALWAYS AS (jsonb_path_query_first(reactions, '$[*] ? (@.trigger == "childrenSettled")') ->> 'name') STORED,
    delete_reaction  text GENERATED ALWAYS AS (jsonb_path_query_first(reactions, '$[*] ? (@.trigger == "deleteRequested")') ->> 'name') STORED,
    resync_reaction  text GENERATED ALWAYS AS (jsonb_path_query_first(reactions, '$[*] ? (@.trigger == "resync")') ->> 'name') STORED,
    reactor_reaction text GENERATED ALWAYS AS (jsonb_path_query_first(reactions, '$[*] ? (@.trigger == "reactor")') ->> 'name') STORED,
    spec_emits   int GENERATED ALWAYS AS (reaction_mask(jsonb_path_query_first(reactions, '$[*] ? (@.trigger == "specChange")'))) STORED,
    rollup_emits int GENERATED ALWAYS AS (reaction_mask(jsonb_path_query_first(reactions, '$[*] ? (@.trigger == "childrenSettled")'))) STORED,
    is_reactor   boolean GENERATED ALWAYS AS (
        jsonb_array_length(reactions) > 0 AND NOT jsonb_path_exists(reactions, '$[*] ? (@.trigger != "reactor")')) STORED,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, kind_version)
);
-- The CHECK that called validate_kind_manifest (released databases): the
-- engine's trigger of the same name stands in for it.
ALTER TABLE kind_manifest DROP CONSTRAINT IF EXISTS kind_manifest_legal;

-- kind_config is the operator-editable, per-(kind, kind_version) runtime policy.
-- It is seeded from the manifest's policy insert-if-absent and never clobbered.
CREATE TABLE IF NOT EXISTS kind_config (
    kind                   text     NOT NULL,
    kind_version           smallint NOT NULL,
    max_inflight           int      NOT NULL DEFAULT 0 CHECK (max_inflight >= 0),
    task_deadline_secs     int      NOT NULL DEFAULT 0 CHECK (task_deadline_secs >= 0),
    resync_interval_secs   int      NOT NULL DEFAULT 0 CHECK (resync_interval_secs >= 0),
    resync_recomposes      boolean  NOT NULL DEFAULT false,
    orphan_grace_secs      int      NOT NULL DEFAULT 0 CHECK (orphan_grace_secs >= 0),
    max_transient_attempts int      NOT NULL DEFAULT 0 CHECK (max_transient_attempts >= 0),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, kind_version),
    FOREIGN KEY (kind, kind_version) REFERENCES kind_manifest ON DELETE CASCADE
);

-- Per-kind in-flight partials, one per claimer shard range; SUM is the global
-- count. UNLOGGED so it resets with work_queue after a crash.
CREATE UNLOGGED TABLE IF NOT EXISTS kind_inflight (
    kind         text     NOT NULL,
    kind_version smallint NOT NULL,
    range_lo     smallint NOT NULL,
    in_flight    int      NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, kind_version, range_lo)
);

-- Resources ------------------------------------------------------------------

-- resources keeps 30% of each page free (fillfactor 70) and no index mentions
-- a column the drain writes, so the drain's update is HOT (measured: 590 ->
-- 210-255 ms per 10k leaves). last_task_id / last_task_epoch recognise a
-- repeated completion after the drain finished its task; last_claimed_at
-- measures claim -> updated. A user-facing change is stamped by the
-- resources_before_update trigger (engine/resources.sql).
CREATE TABLE IF NOT EXISTS resources (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    shard_id        smallint    GENERATED ALWAYS AS (shard_of(id)) STORED,
    kind            text        NOT NULL,
    kind_version    smallint    NOT NULL CHECK (kind_version BETWEEN 1 AND 32767),
    name            text        NOT NULL CHECK (name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$'),
    labels          jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object'),
    spec            jsonb       NOT NULL DEFAULT '{}',
    status          jsonb,
    owner_id        uuid        REFERENCES resources ON DELETE CASCADE,
    provider_config_ref text,
    generation      bigint      NOT NULL DEFAULT 1,
    spec_gen        bigint      NOT NULL DEFAULT 0, -- generation the specChange reaction last succeeded at
    synced_gen      bigint      NOT NULL DEFAULT 0,
    health_ok       boolean     NOT NULL DEFAULT true,
    failure_gen     bigint      NOT NULL DEFAULT 0,
    failure_terminal boolean    NOT NULL DEFAULT false,
    last_error      text,
    frozen_until    timestamptz,
    deletion_requested_at timestamptz,
    finalizers      text[]      NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    is_ready boolean GENERATED ALWAYS AS (
        synced_gen >= generation AND health_ok AND deletion_requested_at IS NULL) STORED,
    phase text GENERATED ALWAYS AS (
        CASE
            WHEN deletion_requested_at IS NOT NULL          THEN 'Deleting'
            WHEN frozen_until = 'infinity'                  THEN 'Quarantined'
            WHEN failure_gen = generation                   THEN 'Failed'
            WHEN frozen_until IS NOT NULL                   THEN 'Orphaned'
            WHEN synced_gen >= generation AND NOT health_ok THEN 'Degraded'
            WHEN synced_gen >= generation                   THEN 'Ready'
            ELSE 'Reconciling'
        END) STORED,
    last_task_id    uuid,
    last_task_epoch bigint,
    last_claimed_at timestamptz,
    UNIQUE (kind, name),
    FOREIGN KEY (kind, kind_version) REFERENCES kind_manifest ON DELETE RESTRICT,
    CONSTRAINT resources_synced_le_generation CHECK (synced_gen <= generation)
) WITH (fillfactor = 70);
CREATE INDEX IF NOT EXISTS idx_resources_owner ON resources (owner_id) WHERE owner_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_resources_list ON resources (created_at, id);
CREATE INDEX IF NOT EXISTS idx_resources_kind_list ON resources (kind, created_at, id);
CREATE INDEX IF NOT EXISTS idx_resources_labels ON resources USING gin (labels jsonb_path_ops);
CREATE INDEX IF NOT EXISTS idx_resources_failed ON resources (shard_id) WHERE failure_gen = generation;
CREATE INDEX IF NOT EXISTS idx_resources_frozen_sweep ON resources (frozen_until) WHERE frozen_until IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_resources_deleting ON resources (shard_id) WHERE deletion_requested_at IS NOT NULL;
-- No "lagging" partial indexes (they would mention columns the drain writes):
-- the lagging-child probe walks idx_resources_owner, and the reaper's lagging
-- sweep scans, throttled.

CREATE TABLE IF NOT EXISTS providerconfigs (
    name         text     PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$'),
    kind         text     NOT NULL,
    kind_version smallint NOT NULL CHECK (kind_version BETWEEN 1 AND 32767),
    is_default   boolean  NOT NULL DEFAULT false,
    spec         jsonb    NOT NULL DEFAULT '{}',
    data         bytea,
    owner_id     uuid     REFERENCES resources ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (kind, kind_version) REFERENCES kind_manifest ON DELETE RESTRICT
);
CREATE UNIQUE INDEX IF NOT EXISTS providerconfigs_one_default ON providerconfigs (kind, kind_version) WHERE is_default;
CREATE INDEX IF NOT EXISTS idx_providerconfigs_owner ON providerconfigs (owner_id) WHERE owner_id IS NOT NULL;
-- resources and providerconfigs reference each other, so one foreign key is
-- added after both tables. ADD CONSTRAINT has no IF NOT EXISTS: on a
-- released database it is dropped and added again, the same (which checks
-- every resource's reference once, under the migration's lock).
ALTER TABLE resources DROP CONSTRAINT IF EXISTS resources_provider_config_fk;
ALTER TABLE resources ADD CONSTRAINT resources_provider_config_fk
    FOREIGN KEY (provider_config_ref) REFERENCES providerconfigs (name) ON DELETE RESTRICT;

-- resource_deps: dependent waits on dependency; values copy JSON-pointer fields
-- from the dependency's status into the dependent's spec.
CREATE TABLE IF NOT EXISTS resource_deps (
    dependent_id  uuid  NOT NULL REFERENCES resources ON DELETE CASCADE,
    dependency_id uuid  NOT NULL REFERENCES resources ON DELETE CASCADE,
    owner_id      uuid  REFERENCES resources ON DELETE CASCADE,
    value_flows   jsonb NOT NULL DEFAULT '[]',
    PRIMARY KEY (dependent_id, dependency_id),
    CHECK (dependent_id <> dependency_id)
);
CREATE INDEX IF NOT EXISTS idx_resource_deps_dependency ON resource_deps (dependency_id);
CREATE INDEX IF NOT EXISTS idx_resource_deps_owner ON resource_deps (owner_id) WHERE owner_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS resource_conditions (
    resource_id uuid NOT NULL REFERENCES resources ON DELETE CASCADE,
    type        text NOT NULL,
    status      text NOT NULL CHECK (status IN ('True','False','Unknown')),
    reason      text NOT NULL DEFAULT '',
    message     text NOT NULL DEFAULT '',
    last_transition_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, type)
);
-- The drain's probe for stale False conditions to clear: tiny on a healthy fleet.
CREATE INDEX IF NOT EXISTS idx_conditions_false ON resource_conditions (resource_id) WHERE status = 'False';

-- Per-resource event log, bounded by the reaper's prune pass.
-- Keyed (resource_id, id): every read and prune is per resource, and one
-- index per insert is what the hot path can afford.
CREATE TABLE IF NOT EXISTS resource_events (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    resource_id uuid        NOT NULL, -- no FK: inserts are on the hot path; resources_after_delete cleans up
    at          timestamptz NOT NULL DEFAULT now(),
    type        text        NOT NULL,
    generation  bigint,
    message     text        NOT NULL DEFAULT '',
    PRIMARY KEY (resource_id, id)
);
-- The prune's window is an id range: an index-only range scan, no sort. It
-- costs each event insert ~1 us (480k-row inserts: 3.0-4.1 us/row without
-- it, 3.5-5.7 us with).
CREATE INDEX IF NOT EXISTS idx_resource_events_id ON resource_events (id) INCLUDE (resource_id);

-- The queue ------------------------------------------------------------------

-- The work queue is UNLOGGED: resources (generation vs synced_gen) is the truth,
-- and the reaper rebuilds the queue after a crash. One row per (resource,
-- task_type), and only live work: a row is pending or claimed. A completion
-- does not update it (it appends to work_outbox); the drain deletes a
-- finished row, and a transient failure re-pends it. claim_epoch only ever
-- grows, which is what fences stale completions.
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue (
    shard_id        smallint    NOT NULL,
    resource_id     uuid        NOT NULL,
    task_type       text        NOT NULL CHECK (task_type IN ('reconcile','delete','operate')),
    task_id         uuid        NOT NULL DEFAULT gen_random_uuid(),
    kind            text        NOT NULL,
    kind_version    smallint    NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','claimed')),
    trigger         text        NOT NULL DEFAULT 'specChange',
    generation      bigint      NOT NULL,        -- the generation this task should reconcile
    claimed_gen     bigint      NOT NULL DEFAULT 0,
    rollup_dirty    boolean     NOT NULL DEFAULT false,
    reaction        text,
    emits           int         NOT NULL DEFAULT 0,
    attempts        int         NOT NULL DEFAULT 0,
    not_before      timestamptz NOT NULL DEFAULT now(),
    claim_epoch     bigint      NOT NULL DEFAULT 0,
    claimed_by      text,
    claim_lo        smallint,
    claimed_at      timestamptz,
    lease_until     timestamptz,
    deadline        timestamptz,
    enqueued_at     timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    PRIMARY KEY (shard_id, resource_id, task_type)
) PARTITION BY RANGE (shard_id);
CREATE INDEX IF NOT EXISTS idx_work_queue_pending ON work_queue (shard_id, not_before) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS idx_work_queue_leased ON work_queue (shard_id, lease_until) WHERE state = 'claimed';
CREATE INDEX IF NOT EXISTS idx_work_queue_task ON work_queue (task_id);

-- Task outcomes waiting for the drain. Keyed by the claim, so a repeated
-- completion conflicts and is a duplicate.
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY,
    shard_id      smallint    NOT NULL,
    resource_id   uuid        NOT NULL,
    task_id       uuid        NOT NULL,
    task_type     text        NOT NULL,
    kind          text        NOT NULL,
    kind_version  smallint    NOT NULL,
    trigger       text        NOT NULL,
    claim_epoch   bigint      NOT NULL,
    generation    bigint      NOT NULL,
    emits         int         NOT NULL,
    outcome       jsonb,
    error         text,
    terminal      boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    claimed_at    timestamptz,
    PRIMARY KEY (shard_id, task_id, claim_epoch)
) PARTITION BY RANGE (shard_id);

-- LOGGED: a committed lifecycle transition must survive a crash.
CREATE TABLE IF NOT EXISTS lifecycle_outbox (
    shard_id      smallint NOT NULL,
    resource_id   uuid     NOT NULL,
    transition    text     NOT NULL,
    generation    bigint   NOT NULL,
    binding_name  text     NOT NULL,
    claimed_by    text,
    lease_until   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shard_id, resource_id, transition, generation, binding_name)
) PARTITION BY RANGE (shard_id);

-- 16 partitions of 16 shards each, for each of the three.
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p0 PARTITION OF work_queue FOR VALUES FROM (0) TO (16);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p1 PARTITION OF work_queue FOR VALUES FROM (16) TO (32);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p2 PARTITION OF work_queue FOR VALUES FROM (32) TO (48);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p3 PARTITION OF work_queue FOR VALUES FROM (48) TO (64);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p4 PARTITION OF work_queue FOR VALUES FROM (64) TO (80);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p5 PARTITION OF work_queue FOR VALUES FROM (80) TO (96);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p6 PARTITION OF work_queue FOR VALUES FROM (96) TO (112);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p7 PARTITION OF work_queue FOR VALUES FROM (112) TO (128);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p8 PARTITION OF work_queue FOR VALUES FROM (128) TO (144);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p9 PARTITION OF work_queue FOR VALUES FROM (144) TO (160);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p10 PARTITION OF work_queue FOR VALUES FROM (160) TO (176);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p11 PARTITION OF work_queue FOR VALUES FROM (176) TO (192);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p12 PARTITION OF work_queue FOR VALUES FROM (192) TO (208);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p13 PARTITION OF work_queue FOR VALUES FROM (208) TO (224);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p14 PARTITION OF work_queue FOR VALUES FROM (224) TO (240);
CREATE UNLOGGED TABLE IF NOT EXISTS work_queue_p15 PARTITION OF work_queue FOR VALUES FROM (240) TO (256);

CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p0 PARTITION OF work_outbox FOR VALUES FROM (0) TO (16);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p1 PARTITION OF work_outbox FOR VALUES FROM (16) TO (32);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p2 PARTITION OF work_outbox FOR VALUES FROM (32) TO (48);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p3 PARTITION OF work_outbox FOR VALUES FROM (48) TO (64);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p4 PARTITION OF work_outbox FOR VALUES FROM (64) TO (80);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p5 PARTITION OF work_outbox FOR VALUES FROM (80) TO (96);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p6 PARTITION OF work_outbox FOR VALUES FROM (96) TO (112);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p7 PARTITION OF work_outbox FOR VALUES FROM (112) TO (128);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p8 PARTITION OF work_outbox FOR VALUES FROM (128) TO (144);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p9 PARTITION OF work_outbox FOR VALUES FROM (144) TO (160);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p10 PARTITION OF work_outbox FOR VALUES FROM (160) TO (176);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p11 PARTITION OF work_outbox FOR VALUES FROM (176) TO (192);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p12 PARTITION OF work_outbox FOR VALUES FROM (192) TO (208);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p13 PARTITION OF work_outbox FOR VALUES FROM (208) TO (224);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p14 PARTITION OF work_outbox FOR VALUES FROM (224) TO (240);
CREATE UNLOGGED TABLE IF NOT EXISTS work_outbox_p15 PARTITION OF work_outbox FOR VALUES FROM (240) TO (256);

CREATE TABLE IF NOT EXISTS lifecycle_outbox_p0 PARTITION OF lifecycle_outbox FOR VALUES FROM (0) TO (16);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p1 PARTITION OF lifecycle_outbox FOR VALUES FROM (16) TO (32);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p2 PARTITION OF lifecycle_outbox FOR VALUES FROM (32) TO (48);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p3 PARTITION OF lifecycle_outbox FOR VALUES FROM (48) TO (64);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p4 PARTITION OF lifecycle_outbox FOR VALUES FROM (64) TO (80);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p5 PARTITION OF lifecycle_outbox FOR VALUES FROM (80) TO (96);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p6 PARTITION OF lifecycle_outbox FOR VALUES FROM (96) TO (112);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p7 PARTITION OF lifecycle_outbox FOR VALUES FROM (112) TO (128);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p8 PARTITION OF lifecycle_outbox FOR VALUES FROM (128) TO (144);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p9 PARTITION OF lifecycle_outbox FOR VALUES FROM (144) TO (160);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p10 PARTITION OF lifecycle_outbox FOR VALUES FROM (160) TO (176);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p11 PARTITION OF lifecycle_outbox FOR VALUES FROM (176) TO (192);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p12 PARTITION OF lifecycle_outbox FOR VALUES FROM (192) TO (208);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p13 PARTITION OF lifecycle_outbox FOR VALUES FROM (208) TO (224);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p14 PARTITION OF lifecycle_outbox FOR VALUES FROM (224) TO (240);
CREATE TABLE IF NOT EXISTS lifecycle_outbox_p15 PARTITION OF lifecycle_outbox FOR VALUES FROM (240) TO (256);
-- drain_item is one outcome after its work row was finalized (a variable
-- type of drain_outbox_batch). A composite type has no IF NOT EXISTS, and
-- nothing depends on it in the catalogue, so it is dropped and created again.
DROP TYPE IF EXISTS drain_item;
CREATE TYPE drain_item AS (
    resource_id uuid, task_id uuid, claim_epoch bigint, claimed_at timestamptz, trigger text, generation bigint, emits int, outcome jsonb,
    error text, terminal boolean, rerun boolean, rollup_dirty boolean, has_rollup boolean);

-- Composite roots whose settledness a concurrent drain may have straddled.
CREATE UNLOGGED TABLE IF NOT EXISTS rollup_recheck (
    shard_id   smallint NOT NULL,
    root_id    uuid     NOT NULL,
    armed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shard_id, root_id)
);

-- Reactors ---------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS reactor_bindings (
    name               text     PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$'),
    watch_kind         text     NOT NULL,
    watch_kind_version smallint CHECK (watch_kind_version BETWEEN 1 AND 32767),
    transition         text     NOT NULL CHECK (transition IN ('created','synced','degraded','failed','deleted')),
    reactor            text     NOT NULL,
    reactor_version    smallint CHECK (reactor_version BETWEEN 1 AND 32767),
    label_match        jsonb    NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(label_match) = 'object'),
    enabled            boolean  NOT NULL DEFAULT true,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CHECK (watch_kind <> reactor)
);
CREATE INDEX IF NOT EXISTS idx_reactor_bindings_watch ON reactor_bindings (watch_kind, transition) WHERE enabled;

-- Cluster and wakes ------------------------------------------------------------

CREATE TABLE IF NOT EXISTS cluster_members (
    member_id      text        PRIMARY KEY,
    role           text        NOT NULL CHECK (role IN ('all','control','dispatch')),
    host           text        NOT NULL DEFAULT '',
    pid            int         NOT NULL DEFAULT 0,
    version        text        NOT NULL DEFAULT '',
    shard_lo       smallint,
    shard_hi       smallint,
    in_flight      int         NOT NULL DEFAULT 0,
    info           jsonb       NOT NULL DEFAULT '{}',
    started_at     timestamptz NOT NULL DEFAULT now(),
    last_heartbeat timestamptz NOT NULL DEFAULT now()
);

-- notify_gated's per-channel coalescing window.
CREATE UNLOGGED TABLE IF NOT EXISTS wake_state (
    channel      text PRIMARY KEY,
    last_notified timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO wake_state (channel) VALUES ('work_ready'), ('outbox_ready'), ('cluster_changed'), ('rollup_recheck')
    ON CONFLICT DO NOTHING;

-- Endpoints --------------------------------------------------------------------

-- Provider endpoints the dispatcher pushes tasks to. Secrets are stored
-- encrypted (AES-GCM, key from the environment) and never returned after create.
CREATE TABLE IF NOT EXISTS endpoints (
    name                 text     PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$'),
    kinds                jsonb    NOT NULL DEFAULT '[]',
    target               jsonb    NOT NULL,
    health               jsonb    NOT NULL DEFAULT '{}',
    max_concurrency      int      NOT NULL DEFAULT 64 CHECK (max_concurrency BETWEEN 1 AND 100000),
    request_timeout_secs int      NOT NULL DEFAULT 30 CHECK (request_timeout_secs BETWEEN 1 AND 3600),
    enabled              boolean  NOT NULL DEFAULT true,
    disabled_reason      text     NOT NULL DEFAULT '',
    secret_enc           bytea    NOT NULL,
    prev_secret_enc      bytea,
    prev_secret_expires  timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- Failed delivery attempts, bounded per endpoint by the reaper.
CREATE TABLE IF NOT EXISTS endpoint_deliveries (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint    text        NOT NULL REFERENCES endpoints ON DELETE CASCADE,
    at          timestamptz NOT NULL DEFAULT now(),
    task_id     uuid        NOT NULL,
    resource_id uuid,
    claim_epoch bigint      NOT NULL,
    attempt     int         NOT NULL,
    http_status int,
    latency_ms  int         NOT NULL,
    reason      text        NOT NULL,
    excerpt     text        NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idx_endpoint_deliveries_endpoint ON endpoint_deliveries (endpoint, id);
CREATE INDEX IF NOT EXISTS idx_endpoint_deliveries_resource ON endpoint_deliveries (resource_id, id);

-- Migrations' own records --------------------------------------------------------

-- The checksum of every applied numbered migration, recorded when it is
-- applied and checked before every Up: a merged migration edited afterwards
-- (its change never reaches databases that already ran it) stops the boot
-- with the file named, instead of running new code against an old schema.
CREATE TABLE IF NOT EXISTS converge_migration_checksums (
    version     bigint      PRIMARY KEY,
    file        text        NOT NULL,
    sha256      text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- The checksum of each engine file (migrations/engine/*.sql) as last applied.
-- Up re-applies a file whose embedded sha256 differs, and records the new one
-- in the same transaction.
CREATE TABLE IF NOT EXISTS converge_engine_checksums (
    file       text        PRIMARY KEY,
    sha256     text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
-- The whole schema: the inverse of building it on an empty database. (Rolled
-- back on an upgraded database, it leaves goose at 11 with nothing behind it.)
DROP TABLE IF EXISTS converge_engine_checksums, converge_migration_checksums;
DROP TABLE IF EXISTS endpoint_deliveries, endpoints, rollup_recheck, wake_state, kind_inflight,
    cluster_members, resource_events, resource_conditions, reactor_bindings, lifecycle_outbox,
    work_outbox, work_queue, resource_deps CASCADE;
ALTER TABLE IF EXISTS resources DROP CONSTRAINT IF EXISTS resources_provider_config_fk;
DROP TABLE IF EXISTS providerconfigs, resources, kind_config, kind_manifest CASCADE;
DROP TYPE IF EXISTS drain_item;
-- The engine's functions (migrations/engine/) and the column helpers above.
DROP FUNCTION IF EXISTS
    validate_kind_manifest, kind_manifest_check_legal, kind_manifest_seed_config, kind_manifest_notify_delete,
    resources_before_update, resources_after_delete,
    notify_gated, providerconfigs_changed, endpoints_changed,
    log_events, work_queue_scheduled, prune_resource_events,
    enqueue_reconcile, schedule_eligible, schedule_applied, cascade_on_ready_change, reconcile_now,
    schedule_rollup, drain_rollup_rechecks,
    claim_tasks, inflight_release, extend_leases, release_tasks,
    complete_tasks, expire_async_tasks,
    drain_outbox_batch, apply_compose,
    pointer_path, apply_flows, substitute_values,
    reap_expired_leases, requeue_lagging, delete_unclaimed_work, recount_inflight, sweep_expired_orphans,
    assign_member_shards, cluster_members_changed;
DROP FUNCTION IF EXISTS reaction_mask, outcome_bit, shard_of;
