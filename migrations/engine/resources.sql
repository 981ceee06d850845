-- Resources: what a user-facing write and a delete set off on the row.

-- resources_before_update makes a spec or version change a new generation and
-- stamps updated_at.
CREATE OR REPLACE FUNCTION resources_before_update() RETURNS trigger
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
-- Only user-facing changes fire it: the drain's hot UPDATE stamps updated_at
-- itself and never pays for a row trigger.
CREATE OR REPLACE TRIGGER resources_before_update BEFORE UPDATE ON resources
    FOR EACH ROW
    WHEN (NEW.spec IS DISTINCT FROM OLD.spec OR NEW.kind_version IS DISTINCT FROM OLD.kind_version
          OR NEW.labels IS DISTINCT FROM OLD.labels OR NEW.provider_config_ref IS DISTINCT FROM OLD.provider_config_ref
          OR NEW.frozen_until IS DISTINCT FROM OLD.frozen_until
          OR NEW.deletion_requested_at IS DISTINCT FROM OLD.deletion_requested_at)
    EXECUTE FUNCTION resources_before_update();

-- A removed resource takes its queued work and its events with it (the queue
-- is UNLOGGED and partitioned, and events are written on the hot path, so
-- neither carries a foreign key).
CREATE OR REPLACE FUNCTION resources_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- EXECUTE: planned for this statement's transition table (see
    -- cascade_on_ready_change).
    EXECUTE 'DELETE FROM work_queue w USING old_rows o WHERE w.shard_id = o.shard_id AND w.resource_id = o.id';
    EXECUTE 'DELETE FROM resource_events e USING old_rows o WHERE e.resource_id = o.id';
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER resources_after_delete AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION resources_after_delete();
