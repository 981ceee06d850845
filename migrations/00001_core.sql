-- Core schema: kinds, resources, provider configs, dependencies, the sharded
-- work queue and outbox, lifecycle outbox, reactor bindings, conditions, events,
-- cluster membership, endpoints. Behaviour (scheduling, drain, reaper) lives in
-- 00002_engine.sql; this file holds tables, constraints and row-level invariants.

-- +goose Up

-- shard_of maps a resource id onto the fixed 256-shard axis. hashtext is stable
-- across PostgreSQL versions for a given input; & 255 keeps it non-negative.
-- +goose StatementBegin
CREATE FUNCTION shard_of(id uuid) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (hashtext(id::text) & 255)::smallint
$$;
-- +goose StatementEnd

-- Outcome mask bits, shared with control/model (OutcomeMask).
-- +goose StatementBegin
CREATE FUNCTION outcome_bit(part text) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE part
        WHEN 'children' THEN 1 WHEN 'edges' THEN 2 WHEN 'configs' THEN 4
        WHEN 'status' THEN 8 WHEN 'conditions' THEN 16 WHEN 'finalizer' THEN 32
        WHEN 'operationOutput' THEN 64 WHEN 'sideEffect' THEN 128
    END
$$;
-- +goose StatementEnd

-- validate_kind_manifest is the DB half of model.ValidateManifest: it returns
-- NULL for a legal reaction set, else the first rule broken. Both halves must
-- agree; the Go half gives the friendlier error, this one guards every writer.
-- +goose StatementBegin
CREATE FUNCTION validate_kind_manifest(reactions jsonb, finalizer_name text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    r jsonb;
    e jsonb;
    trig text;
    mask int;
    bit int;
    names text[] := '{}';
    verbs text[] := '{}';
    composers int := 0;
    rollups int := 0;
    reactors int := 0;
    spec_changes int := 0;
BEGIN
    IF reactions IS NULL OR jsonb_typeof(reactions) <> 'array' THEN
        RETURN 'reactions must be an array';
    END IF;
    FOR r IN SELECT * FROM jsonb_array_elements(reactions) LOOP
        IF jsonb_typeof(r) <> 'object' THEN RETURN 'each reaction must be an object'; END IF;
        IF coalesce(r->>'name', '') = '' THEN RETURN 'reaction name is required'; END IF;
        IF (r->>'name') = ANY (names) THEN RETURN format('reaction name %s is duplicated', r->>'name'); END IF;
        names := names || (r->>'name');
        trig := r->>'trigger';
        IF trig IS NULL OR trig NOT IN ('specChange','childrenSettled','deleteRequested','operation','reactor','resync') THEN
            RETURN format('reaction %s: trigger %s is not one of specChange, childrenSettled, deleteRequested, operation, reactor, resync', r->>'name', coalesce(trig, '(missing)'));
        END IF;
        IF jsonb_typeof(r->'emits') IS DISTINCT FROM 'array' OR jsonb_array_length(r->'emits') = 0 THEN
            RETURN format('reaction %s: emits must be a non-empty array', r->>'name');
        END IF;
        mask := 0;
        FOR e IN SELECT * FROM jsonb_array_elements(r->'emits') LOOP
            bit := CASE WHEN jsonb_typeof(e) = 'string' THEN outcome_bit(e #>> '{}') END;
            IF bit IS NULL THEN
                RETURN format('reaction %s: emits value %s is not one of children, edges, configs, status, conditions, finalizer, operationOutput, sideEffect', r->>'name', e::text);
            END IF;
            mask := mask | bit;
        END LOOP;
        IF coalesce(r->>'verb', '') <> '' AND trig <> 'operation' THEN
            RETURN format('reaction %s: verb is only allowed on an operation reaction', r->>'name');
        END IF;
        IF coalesce(r->>'finalizer', '') <> '' AND trig <> 'deleteRequested' THEN
            RETURN format('reaction %s: finalizer is only allowed on a deleteRequested reaction', r->>'name');
        END IF;
        IF trig = 'specChange' THEN
            spec_changes := spec_changes + 1;
            IF mask & 1 <> 0 THEN
                composers := composers + 1;
                IF mask & 8 = 0 THEN RETURN format('reaction %s: a composer (specChange emitting children) must also emit status', r->>'name'); END IF;
                IF mask & 128 <> 0 THEN RETURN format('reaction %s: a composer may not emit sideEffect', r->>'name'); END IF;
            END IF;
        ELSIF trig = 'childrenSettled' AND mask & 8 <> 0 THEN
            rollups := rollups + 1;
        ELSIF trig = 'operation' THEN
            IF coalesce(r->>'verb', '') = '' THEN RETURN format('reaction %s: an operation reaction needs a verb', r->>'name'); END IF;
            IF (r->>'verb') = ANY (verbs) THEN RETURN format('reaction %s: verb %s is handled twice', r->>'name', r->>'verb'); END IF;
            verbs := verbs || (r->>'verb');
        ELSIF trig = 'deleteRequested' THEN
            IF coalesce(r->>'finalizer', '') = '' AND coalesce(finalizer_name, '') = '' THEN
                RETURN format('reaction %s: a deleteRequested reaction needs a finalizer (on the reaction or the manifest)', r->>'name');
            END IF;
        ELSIF trig = 'reactor' THEN
            reactors := reactors + 1;
            IF mask <> 128 THEN RETURN format('reaction %s: a reactor reaction must emit sideEffect and nothing else', r->>'name'); END IF;
        END IF;
    END LOOP;
    IF composers > 1 THEN RETURN 'at most one composer (specChange emitting children) per kind'; END IF;
    IF spec_changes > 1 THEN RETURN 'at most one specChange reaction per kind (one request carries one reaction)'; END IF;
    IF rollups > 1 THEN RETURN 'at most one rollup (childrenSettled emitting status) per kind'; END IF;
    IF reactors > 1 THEN RETURN 'at most one reactor reaction per kind'; END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- reaction_of picks the reaction a task runs: its name and its emits mask.
-- +goose StatementBegin
CREATE FUNCTION reaction_mask(r jsonb) RETURNS int
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(bit_or(outcome_bit(e)), 0)::int FROM jsonb_array_elements_text(r->'emits') e
$$;
-- +goose StatementEnd

CREATE TABLE kind_manifest (
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
    PRIMARY KEY (kind, kind_version),
    CONSTRAINT kind_manifest_legal CHECK (validate_kind_manifest(reactions, finalizer_name) IS NULL)
);

-- kind_config is the operator-editable, per-(kind, kind_version) runtime policy.
-- It is seeded from the manifest's policy insert-if-absent and never clobbered.
CREATE TABLE kind_config (
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

-- +goose StatementBegin
CREATE FUNCTION kind_manifest_seed_config() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO kind_config (kind, kind_version, max_inflight, task_deadline_secs,
        resync_interval_secs, resync_recomposes, orphan_grace_secs, max_transient_attempts)
    VALUES (NEW.kind, NEW.kind_version,
        coalesce((NEW.policy->>'max_inflight')::int, 0),
        coalesce((NEW.policy->>'task_deadline_secs')::int, 0),
        coalesce((NEW.policy->>'resync_interval_secs')::int, 0),
        coalesce((NEW.policy->>'resync_recomposes')::boolean, false),
        coalesce((NEW.policy->>'orphan_grace_secs')::int, 0),
        coalesce((NEW.policy->>'max_transient_attempts')::int, 0))
    ON CONFLICT DO NOTHING;
    PERFORM pg_notify('kind_manifest_changed', NEW.kind || '/' || NEW.kind_version);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER kind_manifest_seed AFTER INSERT OR UPDATE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION kind_manifest_seed_config();

-- +goose StatementBegin
CREATE FUNCTION kind_manifest_notify_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kind_manifest_changed', OLD.kind || '/' || OLD.kind_version);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER kind_manifest_deleted AFTER DELETE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION kind_manifest_notify_delete();

CREATE TABLE resources (
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
    UNIQUE (kind, name),
    FOREIGN KEY (kind, kind_version) REFERENCES kind_manifest ON DELETE RESTRICT,
    CONSTRAINT resources_synced_le_generation CHECK (synced_gen <= generation)
);
CREATE INDEX idx_resources_owner ON resources (owner_id) WHERE owner_id IS NOT NULL;
CREATE INDEX idx_resources_list ON resources (created_at, id);
CREATE INDEX idx_resources_kind_list ON resources (kind, created_at, id);
CREATE INDEX idx_resources_labels ON resources USING gin (labels jsonb_path_ops);
CREATE INDEX idx_resources_failed ON resources (shard_id) WHERE failure_gen = generation;
-- A child that still holds its composite's rollup back. Empty on a settled fleet.
CREATE INDEX idx_resources_lagging_child ON resources (owner_id)
    WHERE synced_gen < generation AND failure_gen <> generation AND frozen_until IS NULL AND owner_id IS NOT NULL;
-- The reaper's crash-recovery probe: lagging, live rows. Empty on a settled fleet.
CREATE INDEX idx_resources_lagging ON resources (shard_id, updated_at)
    WHERE synced_gen < generation AND deletion_requested_at IS NULL AND frozen_until IS NULL;
CREATE INDEX idx_resources_frozen_sweep ON resources (frozen_until) WHERE frozen_until IS NOT NULL;
CREATE INDEX idx_resources_deleting ON resources (shard_id) WHERE deletion_requested_at IS NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION resources_before_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- A spec or version change is a new generation. jsonb equality is
    -- semantic, so a re-apply of byte-different but equal JSON is no change.
    IF NEW.spec IS DISTINCT FROM OLD.spec OR NEW.kind_version <> OLD.kind_version THEN
        NEW.generation := OLD.generation + 1;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd
-- Only user-facing changes fire it: the drain's hot UPDATE stamps updated_at
-- itself and never pays for a row trigger.
CREATE TRIGGER resources_before_update BEFORE UPDATE ON resources
    FOR EACH ROW
    WHEN (NEW.spec IS DISTINCT FROM OLD.spec OR NEW.kind_version IS DISTINCT FROM OLD.kind_version
          OR NEW.labels IS DISTINCT FROM OLD.labels OR NEW.provider_config_ref IS DISTINCT FROM OLD.provider_config_ref
          OR NEW.frozen_until IS DISTINCT FROM OLD.frozen_until
          OR NEW.deletion_requested_at IS DISTINCT FROM OLD.deletion_requested_at)
    EXECUTE FUNCTION resources_before_update();

CREATE TABLE providerconfigs (
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
CREATE UNIQUE INDEX providerconfigs_one_default ON providerconfigs (kind, kind_version) WHERE is_default;
CREATE INDEX idx_providerconfigs_owner ON providerconfigs (owner_id) WHERE owner_id IS NOT NULL;
ALTER TABLE resources ADD CONSTRAINT resources_provider_config_fk
    FOREIGN KEY (provider_config_ref) REFERENCES providerconfigs (name) ON DELETE RESTRICT;

-- +goose StatementBegin
CREATE FUNCTION providerconfigs_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('providerconfig_changed', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER providerconfigs_changed AFTER INSERT OR UPDATE OR DELETE ON providerconfigs
    FOR EACH STATEMENT EXECUTE FUNCTION providerconfigs_changed();

-- resource_deps: dependent waits on dependency; values copy JSON-pointer fields
-- from the dependency's status into the dependent's spec.
CREATE TABLE resource_deps (
    dependent_id  uuid  NOT NULL REFERENCES resources ON DELETE CASCADE,
    dependency_id uuid  NOT NULL REFERENCES resources ON DELETE CASCADE,
    owner_id      uuid  REFERENCES resources ON DELETE CASCADE,
    value_flows   jsonb NOT NULL DEFAULT '[]',
    PRIMARY KEY (dependent_id, dependency_id),
    CHECK (dependent_id <> dependency_id)
);
CREATE INDEX idx_resource_deps_dependency ON resource_deps (dependency_id);
CREATE INDEX idx_resource_deps_owner ON resource_deps (owner_id) WHERE owner_id IS NOT NULL;

-- The work queue is UNLOGGED: resources (generation vs synced_gen) is the truth,
-- and the reaper rebuilds the queue after a crash. One row per (resource,
-- task_type); its state walks pending -> claimed -> completed -> done, and
-- claim_epoch only ever grows, which is what fences stale completions.
CREATE UNLOGGED TABLE work_queue (
    shard_id        smallint    NOT NULL,
    resource_id     uuid        NOT NULL,
    task_type       text        NOT NULL CHECK (task_type IN ('reconcile','delete','operate')),
    task_id         uuid        NOT NULL DEFAULT gen_random_uuid(),
    kind            text        NOT NULL,
    kind_version    smallint    NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','claimed','completed','done')),
    trigger         text        NOT NULL DEFAULT 'specChange',
    generation      bigint      NOT NULL,        -- the generation this task should reconcile
    claimed_gen     bigint      NOT NULL DEFAULT 0,
    rollup_dirty    boolean     NOT NULL DEFAULT false,
    reaction        text,
    emits           int         NOT NULL DEFAULT 0,
    attempts        int         NOT NULL DEFAULT 0,
    not_before      timestamptz NOT NULL DEFAULT now(),
    claim_epoch     bigint      NOT NULL DEFAULT 0,
    completed_epoch bigint      NOT NULL DEFAULT 0,
    claimed_by      text,
    claim_lo        smallint,
    claimed_at      timestamptz,
    lease_until     timestamptz,
    deadline        timestamptz,
    enqueued_at     timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    PRIMARY KEY (shard_id, resource_id, task_type)
) PARTITION BY RANGE (shard_id);
CREATE INDEX idx_work_queue_pending ON work_queue (shard_id, not_before) WHERE state = 'pending';
CREATE INDEX idx_work_queue_leased ON work_queue (shard_id, lease_until) WHERE state = 'claimed';
CREATE INDEX idx_work_queue_task ON work_queue (task_id);

CREATE UNLOGGED TABLE work_outbox (
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
    PRIMARY KEY (shard_id, id)
) PARTITION BY RANGE (shard_id);

-- LOGGED: a committed lifecycle transition must survive a crash.
CREATE TABLE lifecycle_outbox (
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

-- +goose StatementBegin
DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format('CREATE UNLOGGED TABLE work_queue_p%s PARTITION OF work_queue FOR VALUES FROM (%s) TO (%s)', i, i*16, (i+1)*16);
        EXECUTE format('CREATE UNLOGGED TABLE work_outbox_p%s PARTITION OF work_outbox FOR VALUES FROM (%s) TO (%s)', i, i*16, (i+1)*16);
        EXECUTE format('CREATE TABLE lifecycle_outbox_p%s PARTITION OF lifecycle_outbox FOR VALUES FROM (%s) TO (%s)', i, i*16, (i+1)*16);
    END LOOP;
END
$$;
-- +goose StatementEnd

CREATE TABLE reactor_bindings (
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
CREATE INDEX idx_reactor_bindings_watch ON reactor_bindings (watch_kind, transition) WHERE enabled;

CREATE TABLE resource_conditions (
    resource_id uuid NOT NULL REFERENCES resources ON DELETE CASCADE,
    type        text NOT NULL,
    status      text NOT NULL CHECK (status IN ('True','False','Unknown')),
    reason      text NOT NULL DEFAULT '',
    message     text NOT NULL DEFAULT '',
    last_transition_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, type)
);

-- Per-resource event log, bounded by the reaper's prune pass.
-- Keyed (resource_id, id): every read and prune is per resource, and one
-- index per insert is what the hot path can afford.
CREATE TABLE resource_events (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    resource_id uuid        NOT NULL, -- no FK: inserts are on the hot path; resources_after_delete cleans up
    at          timestamptz NOT NULL DEFAULT now(),
    type        text        NOT NULL,
    generation  bigint,
    message     text        NOT NULL DEFAULT '',
    PRIMARY KEY (resource_id, id)
);

CREATE TABLE cluster_members (
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

-- Per-kind in-flight partials, one per claimer shard range; SUM is the global
-- count. UNLOGGED so it resets with work_queue after a crash.
CREATE UNLOGGED TABLE kind_inflight (
    kind         text     NOT NULL,
    kind_version smallint NOT NULL,
    range_lo     smallint NOT NULL,
    in_flight    int      NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, kind_version, range_lo)
);

-- notify_gated's per-channel coalescing window.
CREATE UNLOGGED TABLE wake_state (
    channel      text PRIMARY KEY,
    last_notified timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO wake_state (channel) VALUES ('work_ready'), ('outbox_ready'), ('cluster_changed'), ('rollup_recheck');

-- Composite roots whose settledness a concurrent drain may have straddled.
CREATE UNLOGGED TABLE rollup_recheck (
    shard_id   smallint NOT NULL,
    root_id    uuid     NOT NULL,
    armed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shard_id, root_id)
);

-- Provider endpoints the dispatcher pushes tasks to. Secrets are stored
-- encrypted (AES-GCM, key from the environment) and never returned after create.
CREATE TABLE endpoints (
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
CREATE TABLE endpoint_deliveries (
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
CREATE INDEX idx_endpoint_deliveries_endpoint ON endpoint_deliveries (endpoint, id);
CREATE INDEX idx_endpoint_deliveries_resource ON endpoint_deliveries (resource_id, id);

-- +goose Down
DROP TABLE IF EXISTS endpoint_deliveries, endpoints, rollup_recheck, wake_state, kind_inflight,
    cluster_members, resource_events, resource_conditions, reactor_bindings, lifecycle_outbox,
    work_outbox, work_queue, resource_deps CASCADE;
ALTER TABLE IF EXISTS resources DROP CONSTRAINT IF EXISTS resources_provider_config_fk;
DROP TABLE IF EXISTS providerconfigs, resources, kind_config, kind_manifest CASCADE;
DROP FUNCTION IF EXISTS providerconfigs_changed, resources_before_update, kind_manifest_notify_delete,
    kind_manifest_seed_config, reaction_mask, validate_kind_manifest, outcome_bit, shard_of;
