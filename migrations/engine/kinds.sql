-- Kinds: the legality rules every manifest write is held to, and what a
-- write sets off: the kind's runtime policy seeded into kind_config and a
-- wake for every server's manifest cache.
--
-- The rules were a CHECK on kind_manifest until migration 00012; they are a
-- BEFORE trigger now, because a table cannot be created with a CHECK that
-- calls a function the engine only defines after the numbered migrations
-- (migrations/README.md).

-- validate_kind_manifest is the DB half of model.ValidateManifest: it returns
-- NULL for a legal reaction set, else the first rule broken. Both halves must
-- agree; the Go half gives the friendlier error, this one guards every writer.
CREATE OR REPLACE FUNCTION validate_kind_manifest(reactions jsonb, finalizer_name text) RETURNS text
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

-- kind_manifest_check_legal refuses an illegal manifest exactly as the CHECK
-- it replaced did: SQLSTATE 23514 (check_violation), constraint
-- kind_manifest_legal, the same message, so the store's error mapping (by
-- SQLSTATE and constraint name) is unchanged. The DETAIL names the rule broken.
CREATE OR REPLACE FUNCTION kind_manifest_check_legal() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_broken text := validate_kind_manifest(NEW.reactions, NEW.finalizer_name);
BEGIN
    IF v_broken IS NOT NULL THEN
        RAISE EXCEPTION 'new row for relation "%" violates check constraint "kind_manifest_legal"', TG_TABLE_NAME
            USING ERRCODE = 'check_violation', CONSTRAINT = 'kind_manifest_legal',
                  SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, DETAIL = v_broken;
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER kind_manifest_legal BEFORE INSERT OR UPDATE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION kind_manifest_check_legal();

-- kind_manifest_seed_config seeds the kind's kind_config row from the
-- manifest's policy, insert-if-absent (an operator's edits are never
-- clobbered), and wakes every server's manifest cache.
CREATE OR REPLACE FUNCTION kind_manifest_seed_config() RETURNS trigger
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
CREATE OR REPLACE TRIGGER kind_manifest_seed AFTER INSERT OR UPDATE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION kind_manifest_seed_config();

-- kind_manifest_notify_delete wakes the manifest caches when a kind version
-- is removed.
CREATE OR REPLACE FUNCTION kind_manifest_notify_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kind_manifest_changed', OLD.kind || '/' || OLD.kind_version);
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER kind_manifest_deleted AFTER DELETE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION kind_manifest_notify_delete();
