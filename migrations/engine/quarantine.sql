-- Quarantine: an operator sets a resource aside (frozen_until = 'infinity',
-- phase Quarantined). The one frozen_until IS NULL gate every scheduler,
-- rollup and value flow already shares with orphaned rows freezes it; the
-- sweep never matches 'infinity'. A spec edit while quarantined persists
-- (and bumps generation) but schedules nothing; a composer's re-emit does not
-- lift it (apply_compose clears only a finite frozen_until). Only
-- set_quarantine(id, false) does.

-- set_quarantine quarantines (p_on) or releases a resource. Quarantine drops
-- a pending reconcile task (never a delete task: teardown goes on) and
-- re-runs its root's rollup, which no longer waits on it. Release re-arms
-- it through schedule_eligible and re-runs the rollup, which counts it
-- again. Repeating either is a no-op. Returns 'deleting' (and changes
-- nothing) for a resource being deleted, else 'ok'.
CREATE OR REPLACE FUNCTION set_quarantine(p_id uuid, p_on boolean) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r resources;
BEGIN
    SELECT * INTO r FROM resources WHERE id = p_id FOR UPDATE;
    IF r.deletion_requested_at IS NOT NULL THEN
        RETURN 'deleting';
    END IF;
    IF p_on AND r.frozen_until IS DISTINCT FROM 'infinity' THEN
        UPDATE resources SET frozen_until = 'infinity' WHERE id = r.id;
        DELETE FROM work_queue
         WHERE shard_id = r.shard_id AND resource_id = r.id AND task_type = 'reconcile' AND state = 'pending';
        INSERT INTO resource_events (resource_id, type, generation, message)
        VALUES (r.id, 'quarantined', r.generation, 'an operator set the resource aside');
    ELSIF NOT p_on AND r.frozen_until = 'infinity' THEN
        UPDATE resources SET frozen_until = NULL WHERE id = r.id;
        INSERT INTO resource_events (resource_id, type, generation, message)
        VALUES (r.id, 'unquarantined', r.generation, 'an operator released the resource');
        PERFORM schedule_eligible(ARRAY[r.id]);
    ELSE
        RETURN 'ok';
    END IF;
    IF r.owner_id IS NOT NULL THEN
        PERFORM schedule_rollup(ARRAY[r.owner_id]);
    END IF;
    RETURN 'ok';
END
$$;
