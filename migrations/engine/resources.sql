-- Resources: what a user-facing write and a delete set off on the row.

-- resources_before_update makes a spec or version change a new generation,
-- and every user-facing change a new resource_version (engine/versions.sql),
-- and stamps updated_at.
CREATE OR REPLACE FUNCTION resources_before_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- A spec or version change is a new generation. jsonb equality is
    -- semantic, so a re-apply of byte-different but equal JSON is no change.
    IF NEW.spec IS DISTINCT FROM OLD.spec OR NEW.kind_version <> OLD.kind_version THEN
        NEW.generation := OLD.generation + 1;
    END IF;
    NEW.resource_version := nextval('resource_versions');
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
-- Only user-facing changes fire it: apply_items' hot UPDATE stamps updated_at
-- itself and never pays for a row trigger. UPDATE OF skips it for a statement
-- that sets none of these columns without evaluating WHEN on each row (jsonb
-- comparisons of spec and labels, as long as the spec).
CREATE OR REPLACE TRIGGER resources_before_update
    BEFORE UPDATE OF spec, kind_version, labels, provider_config_ref, frozen_until, deletion_requested_at ON resources
    FOR EACH ROW
    WHEN (NEW.spec IS DISTINCT FROM OLD.spec OR NEW.kind_version IS DISTINCT FROM OLD.kind_version
          OR NEW.labels IS DISTINCT FROM OLD.labels OR NEW.provider_config_ref IS DISTINCT FROM OLD.provider_config_ref
          OR NEW.frozen_until IS DISTINCT FROM OLD.frozen_until
          OR NEW.deletion_requested_at IS DISTINCT FROM OLD.deletion_requested_at)
    EXECUTE FUNCTION resources_before_update();

-- A removed resource takes its queued work and its events with it (the queue
-- is UNLOGGED and partitioned, and events are written on the hot path, so
-- neither carries a foreign key).
--
-- It is also the 'deleted' lifecycle edge: any hard delete (the API's, a
-- composer's prune, a cascade through owner_id) runs this statement trigger,
-- so every one is seen. The row is gone by the time a reactor is called, so
-- each undelivered lifecycle_outbox row of a removed resource (the new
-- 'deleted' ones, and any 'synced' still waiting) keeps a snapshot of it in
-- the wire shape of a resource (webhooksdk.Resource) and is delivered from
-- that. Each part is behind a probe, so a delete costs nothing more when no
-- binding watches deletes and no delivery waits.
CREATE OR REPLACE FUNCTION resources_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    -- EXECUTE: planned for this statement's transition table (see
    -- cascade_on_ready_change).
    EXECUTE 'DELETE FROM work_queue w USING old_rows o WHERE w.shard_id = o.shard_id AND w.resource_id = o.id';
    EXECUTE 'DELETE FROM resource_events e USING old_rows o WHERE e.resource_id = o.id';
    IF EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'deleted') THEN
        EXECUTE $q$
        INSERT INTO lifecycle_outbox (shard_id, resource_id, transition, generation, binding_name)
        SELECT o.shard_id, o.id, 'deleted', o.generation, b.name
          FROM old_rows o
          JOIN reactor_bindings b ON b.watch_kind = o.kind AND b.transition = 'deleted' AND b.enabled
                                 AND b.namespace = o.namespace
         WHERE (b.watch_kind_version IS NULL OR b.watch_kind_version = o.kind_version)
           AND o.labels @> b.label_match
        ON CONFLICT DO NOTHING
        $q$;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 THEN
            PERFORM notify_gated('work_ready');
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM lifecycle_outbox) THEN
        EXECUTE $q$
        UPDATE lifecycle_outbox l SET snapshot =
               jsonb_build_object('id', o.id, 'kind', o.kind, 'kind_version', o.kind_version, 'name', o.name,
                                  'labels', o.labels, 'spec', o.spec, 'generation', o.generation, 'phase', o.phase)
               || CASE WHEN o.status IS NULL THEN '{}' ELSE jsonb_build_object('status', o.status) END
          FROM old_rows o
         WHERE l.shard_id = o.shard_id AND l.resource_id = o.id AND l.snapshot IS NULL
        $q$;
    END IF;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER resources_after_delete AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION resources_after_delete();
