-- The reaper's passes. Every pass is shard-range scoped, uses SKIP LOCKED, and
-- probes a partial index that is empty on a settled fleet, so an idle pass
-- costs an index lookup (the lagging sweep scans, throttled). The event-log
-- prune is in events.sql.

-- reap_expired_leases re-pends claims whose lease lapsed (a dead dispatcher).
-- The epoch stays; the next claim bumps it, which fences the old holder.
CREATE OR REPLACE FUNCTION reap_expired_leases(p_lo int, p_hi int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    v_kinds text[];
    v_vers smallint[];
    v_los smallint[];
    v_nss text[];
BEGIN
    WITH x AS (
        SELECT shard_id, resource_id, task_type FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi AND state = 'claimed' AND lease_until < now()
           AND NOT EXISTS (SELECT 1 FROM work_outbox o
                            WHERE o.shard_id = work_queue.shard_id AND o.task_id = work_queue.task_id
                              AND o.claim_epoch = work_queue.claim_epoch)
         LIMIT p_limit FOR UPDATE SKIP LOCKED
    ), r AS (
        UPDATE work_queue w SET state = 'pending', claimed_by = NULL, lease_until = NULL, not_before = now(),
               last_error = 'lease expired: the claim holder stopped renewing it'
          FROM x
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.shard_id = x.shard_id AND w.resource_id = x.resource_id AND w.task_type = x.task_type
        RETURNING w.resource_id, w.kind, w.kind_version, w.claim_lo, w.namespace)
    SELECT array_agg(resource_id), array_agg(kind), array_agg(kind_version), array_agg(claim_lo), array_agg(namespace)
      INTO v_ids, v_kinds, v_vers, v_los, v_nss FROM r;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    PERFORM log_events(v_ids, 'reclaimed', 'lease expired; task re-pended');
    -- The tokens last: the lock order (docs/operations.md).
    PERFORM inflight_release(v_kinds, v_vers, v_los, v_nss);
    PERFORM notify_gated('work_ready');
    RETURN cardinality(v_ids);
END
$$;

-- requeue_lagging is the crash-recovery backstop: lagging live resources with
-- no live task, untouched for p_window_secs (e.g. the UNLOGGED queue was lost,
-- or a wake was missed), go back through schedule_eligible; stalled
-- teardowns are advanced again (requeue_teardown), and ops that lost their
-- task go back through requeue_operations.
CREATE OR REPLACE FUNCTION requeue_lagging(p_lo int, p_hi int, p_window_secs int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    n int;
BEGIN
    n := requeue_teardown(p_lo, p_hi, p_window_secs, p_limit)
       + requeue_operations(p_lo, p_hi, p_window_secs, p_limit);
    SELECT array_agg(id) INTO v_ids FROM (
        SELECT r.id FROM resources r
         WHERE r.shard_id BETWEEN p_lo AND p_hi
           AND r.synced_gen < r.generation AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
           AND r.updated_at < now() - make_interval(secs => p_window_secs)
           AND NOT (r.failure_gen = r.generation AND r.failure_terminal)
           AND NOT EXISTS (SELECT 1 FROM work_queue w
                            WHERE w.shard_id = r.shard_id AND w.resource_id = r.id
                              AND w.task_type = 'reconcile')
         LIMIT p_limit) x;
    IF v_ids IS NULL THEN RETURN n; END IF;
    RETURN n + schedule_eligible(v_ids);
END
$$;

-- delete_unclaimed_work drops tasks nobody ever claimed within the window (no
-- endpoint serves the kind any more). The resource stays lagging, so
-- requeue_lagging re-enqueues it if a server comes back.
CREATE OR REPLACE FUNCTION delete_unclaimed_work(p_lo int, p_hi int, p_window_secs int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    WITH x AS (
        SELECT shard_id, resource_id, task_type FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi
           AND state = 'pending' AND claim_epoch = 0
           AND enqueued_at < now() - make_interval(secs => p_window_secs)
         LIMIT p_limit FOR UPDATE SKIP LOCKED)
    DELETE FROM work_queue w USING x
     WHERE w.shard_id BETWEEN p_lo AND p_hi
       AND w.shard_id = x.shard_id AND w.resource_id = x.resource_id AND w.task_type = x.task_type;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- recount_inflight rewrites the kind_inflight and namespace_inflight
-- partials for [p_lo, p_hi] from the queue itself, erasing any drift (and a
-- cap set while tasks were in flight). It takes each capped kind's and each
-- capped namespace's claim lock, in the claim's order, so the truth it
-- writes cannot race a claim. A claimed task whose outcome waits in the
-- outbox is not in flight: complete_tasks gave its token back. A namespace
-- whose cap was lifted loses its partials.
CREATE OR REPLACE FUNCTION recount_inflight(p_lo int, p_hi int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    k record;
BEGIN
    FOR k IN SELECT kind, kind_version FROM kind_config WHERE max_inflight > 0 ORDER BY 1, 2 LOOP
        PERFORM pg_advisory_xact_lock(hashtext('kind_cap:' || k.kind || '/' || k.kind_version));
        DELETE FROM kind_inflight i
         WHERE i.kind = k.kind AND i.kind_version = k.kind_version AND i.range_lo BETWEEN p_lo AND p_hi;
        INSERT INTO kind_inflight (kind, kind_version, range_lo, in_flight)
        SELECT k.kind, k.kind_version, p_lo, count(*)
          FROM work_queue w
         WHERE w.shard_id BETWEEN p_lo AND p_hi AND w.state = 'claimed'
           AND w.kind = k.kind AND w.kind_version = k.kind_version
           AND NOT EXISTS (SELECT 1 FROM work_outbox o
                            WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch);
    END LOOP;
    DELETE FROM namespace_inflight i
     WHERE i.range_lo BETWEEN p_lo AND p_hi
       AND NOT EXISTS (SELECT 1 FROM namespaces n WHERE n.name = i.namespace AND n.max_in_flight IS NOT NULL);
    FOR k IN SELECT name FROM namespaces WHERE max_in_flight IS NOT NULL ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(hashtext('namespace_cap:' || k.name));
        DELETE FROM namespace_inflight i WHERE i.namespace = k.name AND i.range_lo BETWEEN p_lo AND p_hi;
        INSERT INTO namespace_inflight (namespace, range_lo, in_flight)
        SELECT k.name, p_lo, count(*)
          FROM work_queue w
         WHERE w.shard_id BETWEEN p_lo AND p_hi AND w.state = 'claimed' AND w.namespace = k.name
           AND NOT EXISTS (SELECT 1 FROM work_outbox o
                            WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch);
    END LOOP;
END
$$;

-- sweep_expired_orphans tears down composer-dropped children whose grace
-- window elapsed without a re-emit, through the teardown protocol (a
-- finalizer kind's teardown runs first; teardown.sql). 'infinity'
-- (quarantined) never matches.
CREATE OR REPLACE FUNCTION sweep_expired_orphans(p_lo int, p_hi int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    SELECT array_agg(id) INTO v_ids FROM (
        SELECT id FROM resources
         WHERE frozen_until < now() AND shard_id BETWEEN p_lo AND p_hi AND deletion_requested_at IS NULL
         LIMIT p_limit FOR UPDATE SKIP LOCKED) x;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    PERFORM request_deletion(v_ids, 'orphan grace elapsed without a re-emit');
    RETURN cardinality(v_ids);
END
$$;
