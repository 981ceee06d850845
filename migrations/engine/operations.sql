-- Operations: operator verbs invoked on a resource (resource_operations).
-- An op is the truth; its operate task is a work_queue row with task_id = the
-- op's id, trigger 'operation', and the reaction and emits of the verb,
-- resolved here at enqueue. The work_queue key allows one operate row per
-- resource, so a resource's ops run one at a time, oldest first: whatever
-- finishes or cancels one enqueues the next.

-- enqueue_operations gives each of p_rids without an operate task its oldest
-- pending op. An op whose verb the resource's kind version no longer declares
-- (the manifest changed, or the resource moved to another version) fails
-- instead. A resource being deleted gets none: its ops go with it.
CREATE OR REPLACE FUNCTION enqueue_operations(p_rids uuid[]) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    IF p_rids IS NULL THEN RETURN 0; END IF;
    UPDATE resource_operations o SET state = 'failed', updated_at = now(), finished_at = now(),
           error = format('verb %s is not declared by %s/%s', o.verb, r.kind, r.kind_version)
      FROM resources r JOIN kind_manifest m ON m.kind = r.kind AND m.kind_version = r.kind_version
     WHERE o.resource_id = ANY (p_rids) AND o.state = 'pending' AND r.id = o.resource_id
       AND NOT jsonb_path_exists(m.reactions, '$[*] ? (@.trigger == "operation" && @.verb == $v)', jsonb_build_object('v', o.verb));
    INSERT INTO work_queue (shard_id, resource_id, task_type, task_id, kind, kind_version, trigger, generation, reaction, emits, namespace)
    SELECT DISTINCT ON (o.resource_id) r.shard_id, r.id, 'operate', o.id, r.kind, r.kind_version, 'operation', r.generation,
           x.decl->>'name', reaction_mask(x.decl), r.namespace
      FROM resource_operations o
      JOIN resources r ON r.id = o.resource_id
      JOIN kind_manifest m ON m.kind = r.kind AND m.kind_version = r.kind_version
     CROSS JOIN LATERAL (SELECT jsonb_path_query_first(m.reactions, '$[*] ? (@.trigger == "operation" && @.verb == $v)',
                                                       jsonb_build_object('v', o.verb)) AS decl) x
     WHERE o.resource_id = ANY (p_rids) AND o.state = 'pending' AND r.deletion_requested_at IS NULL
     ORDER BY o.resource_id, o.created_at, o.id
    ON CONFLICT (shard_id, resource_id, task_type) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN n;
END
$$;

-- finish_operations records the applied outcomes of operate tasks on their
-- ops (apply_outcomes calls it with every applied item): a success stores
-- the operation_output (when the reaction emits operationOutput); a
-- terminal failure, or one out of attempts, fails the op; a transient one
-- re-pends it with its error, as apply_outcomes re-pended its task. A finished
-- op's resource gets its next pending op.
CREATE OR REPLACE FUNCTION finish_operations(p_items drain_item[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_done uuid[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM unnest(p_items) i WHERE i.trigger = 'operation') THEN RETURN; END IF;
    -- A re-pended task is an error neither terminal nor a rerun (see
    -- apply_outcomes' retry and fin rows).
    WITH u AS (
        UPDATE resource_operations o SET
            state = CASE WHEN i.error IS NULL THEN 'succeeded' WHEN i.terminal OR i.rerun THEN 'failed' ELSE 'pending' END,
            output = CASE WHEN i.error IS NULL AND i.emits & 64 <> 0 THEN i.outcome->'operation_output' END,
            error = i.error,
            updated_at = now(),
            finished_at = CASE WHEN i.error IS NULL OR i.terminal OR i.rerun THEN now() END
          FROM unnest(p_items) i
         WHERE o.id = i.task_id AND i.trigger = 'operation' AND o.state IN ('pending','running')
        RETURNING o.resource_id, o.state)
    SELECT array_agg(resource_id) FILTER (WHERE state <> 'pending') INTO v_done FROM u;
    PERFORM enqueue_operations(v_done);
END
$$;

-- cancel_operation cancels op p_id if it is still pending, deleting its task
-- if not yet claimed, and enqueues the resource's next op. It returns
-- whether it cancelled it, and the op's state ('running' for an op whose task
-- is claimed; NULL when there is no such op). The task row is locked before
-- the op, in apply_outcomes' order.
CREATE OR REPLACE FUNCTION cancel_operation(p_id uuid, OUT cancelled boolean, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
    v_rid uuid;
    v_task text;
BEGIN
    cancelled := false;
    SELECT o.resource_id INTO v_rid FROM resource_operations o WHERE o.id = p_id;
    IF v_rid IS NULL THEN RETURN; END IF;
    SELECT w.state INTO v_task FROM work_queue w
     WHERE w.shard_id = shard_of(v_rid) AND w.resource_id = v_rid AND w.task_type = 'operate' AND w.task_id = p_id
       FOR UPDATE;
    SELECT o.state INTO state FROM resource_operations o WHERE o.id = p_id FOR UPDATE;
    IF state IS DISTINCT FROM 'pending' THEN RETURN; END IF;
    IF v_task = 'claimed' THEN state := 'running'; RETURN; END IF;
    DELETE FROM work_queue w
     WHERE w.shard_id = shard_of(v_rid) AND w.resource_id = v_rid AND w.task_type = 'operate' AND w.task_id = p_id;
    UPDATE resource_operations o SET state = 'cancelled', updated_at = now(), finished_at = now() WHERE o.id = p_id;
    PERFORM enqueue_operations(ARRAY[v_rid]);
    cancelled := true;
    state := 'cancelled';
END
$$;

-- requeue_operations is the crash-recovery backstop for ops (requeue_lagging
-- calls it): a live op untouched for p_window_secs whose resource has no
-- operate task (the UNLOGGED queue was lost, or an unclaimed task was
-- dropped) is pending again and re-enqueued.
CREATE OR REPLACE FUNCTION requeue_operations(p_lo int, p_hi int, p_window_secs int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    WITH lost AS (
        SELECT o.id FROM resource_operations o
          JOIN resources r ON r.id = o.resource_id
         WHERE o.state IN ('pending','running') AND o.updated_at < now() - make_interval(secs => p_window_secs)
           AND r.shard_id BETWEEN p_lo AND p_hi AND r.deletion_requested_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM work_queue w
                            WHERE w.shard_id = r.shard_id AND w.resource_id = r.id AND w.task_type = 'operate')
         LIMIT p_limit FOR UPDATE OF o SKIP LOCKED
    ), up AS (
        UPDATE resource_operations o SET state = 'pending', updated_at = now()
          FROM lost WHERE o.id = lost.id
        RETURNING o.resource_id)
    SELECT array_agg(DISTINCT resource_id) INTO v_ids FROM up;
    RETURN enqueue_operations(v_ids);
END
$$;
