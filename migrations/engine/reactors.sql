-- Reactors: writing the lifecycle edges reactor bindings subscribe to. One
-- lifecycle_outbox row per (resource, transition, generation, binding), so
-- each binding is acked and retried alone; claim_tasks delivers the rows as
-- 'react' tasks and complete_tasks acks them.

-- emit_lifecycle writes p_transition for the resources p_ids, at their
-- current generation, once per enabled binding of the resource's namespace
-- that matches (watch_kind,
-- watch_kind_version if set, labels @> label_match). Callers pass the
-- resources that crossed the edge; the 'deleted' edge is written by
-- resources_after_delete, from the rows already gone. The first statement
-- is the whole cost when no binding watches the transition: one probe of a
-- tiny table, no join, no insert, no notify.
CREATE OR REPLACE FUNCTION emit_lifecycle(p_ids uuid[], p_transition text) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n int;
BEGIN
    IF p_ids IS NULL OR NOT EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = p_transition) THEN
        RETURN 0;
    END IF;
    INSERT INTO lifecycle_outbox (shard_id, resource_id, transition, generation, binding_name)
    SELECT r.shard_id, r.id, p_transition, r.generation, b.name
      FROM resources r
      JOIN reactor_bindings b ON b.watch_kind = r.kind AND b.transition = p_transition AND b.enabled
                             AND b.namespace = r.namespace
     WHERE r.id = ANY (p_ids)
       AND (b.watch_kind_version IS NULL OR b.watch_kind_version = r.kind_version)
       AND r.labels @> b.label_match
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN n;
END
$$;
