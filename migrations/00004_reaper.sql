-- The reaper's passes and cluster membership. Every pass is shard-range
-- scoped, uses SKIP LOCKED, and probes a partial index that is empty on a
-- settled fleet, so an idle pass costs an index lookup.

-- +goose Up

-- release_tasks gives claimed tasks back without burning an attempt (an
-- endpoint said 429, or nothing could take it): pending again after p_delay_ms.
-- +goose StatementBegin
CREATE FUNCTION release_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_delay_ms int, p_reason text)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_kinds text[];
    v_vers smallint[];
    v_los smallint[];
BEGIN
    WITH r AS (
        UPDATE work_queue w SET state = 'pending', claimed_by = NULL, lease_until = NULL,
               not_before = now() + make_interval(secs => p_delay_ms / 1000.0), last_error = p_reason
          FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
         WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id AND w.claim_epoch = i.epoch AND w.state = 'claimed'
        RETURNING w.kind, w.kind_version, w.claim_lo)
    SELECT array_agg(kind), array_agg(kind_version), array_agg(claim_lo) INTO v_kinds, v_vers, v_los FROM r;
    IF v_kinds IS NULL THEN RETURN 0; END IF;
    PERFORM inflight_release(v_kinds, v_vers, v_los);
    RETURN cardinality(v_kinds);
END
$$;
-- +goose StatementEnd

-- extend_leases renews the leases of tasks still claimed at their epoch and
-- returns the ones it renewed; a task missing from the result was superseded.
-- +goose StatementBegin
CREATE FUNCTION extend_leases(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_lease_secs int)
RETURNS TABLE (task_id uuid)
LANGUAGE sql AS $$
    UPDATE work_queue w SET lease_until = now() + make_interval(secs => p_lease_secs)
      FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
     WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id AND w.claim_epoch = i.epoch AND w.state = 'claimed'
    RETURNING w.task_id
$$;
-- +goose StatementEnd

-- reap_expired_leases re-pends claims whose lease lapsed (a dead dispatcher).
-- The epoch stays; the next claim bumps it, which fences the old holder.
-- +goose StatementBegin
CREATE FUNCTION reap_expired_leases(p_lo int, p_hi int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    v_kinds text[];
    v_vers smallint[];
    v_los smallint[];
BEGIN
    WITH x AS (
        SELECT shard_id, resource_id, task_type FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi AND state = 'claimed' AND lease_until < now()
         LIMIT p_limit FOR UPDATE SKIP LOCKED
    ), r AS (
        UPDATE work_queue w SET state = 'pending', claimed_by = NULL, lease_until = NULL, not_before = now(),
               last_error = 'lease expired: the claim holder stopped renewing it'
          FROM x
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.shard_id = x.shard_id AND w.resource_id = x.resource_id AND w.task_type = x.task_type
        RETURNING w.resource_id, w.kind, w.kind_version, w.claim_lo)
    SELECT array_agg(resource_id), array_agg(kind), array_agg(kind_version), array_agg(claim_lo)
      INTO v_ids, v_kinds, v_vers, v_los FROM r;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    PERFORM inflight_release(v_kinds, v_vers, v_los);
    PERFORM log_events(v_ids, 'reclaimed', 'lease expired; task re-pended');
    PERFORM notify_gated('work_ready');
    RETURN cardinality(v_ids);
END
$$;
-- +goose StatementEnd

-- requeue_lagging is the crash-recovery backstop: lagging live resources with
-- no live task, untouched for p_window_secs (e.g. the UNLOGGED queue was lost,
-- or a wake was missed), go back through schedule_eligible.
-- +goose StatementBegin
CREATE FUNCTION requeue_lagging(p_lo int, p_hi int, p_window_secs int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    SELECT array_agg(id) INTO v_ids FROM (
        SELECT r.id FROM resources r
         WHERE r.shard_id BETWEEN p_lo AND p_hi
           AND r.synced_gen < r.generation AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
           AND r.updated_at < now() - make_interval(secs => p_window_secs)
           AND NOT (r.failure_gen = r.generation AND r.failure_terminal)
           AND NOT EXISTS (SELECT 1 FROM work_queue w
                            WHERE w.shard_id = r.shard_id AND w.resource_id = r.id
                              AND w.task_type = 'reconcile' AND w.state <> 'done')
         LIMIT p_limit) x;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    RETURN schedule_eligible(v_ids);
END
$$;
-- +goose StatementEnd

-- delete_unclaimed_work drops tasks nobody ever claimed within the window (no
-- endpoint serves the kind any more) and done rows past it. The resource stays
-- lagging, so requeue_lagging re-enqueues it if a server comes back.
-- +goose StatementBegin
CREATE FUNCTION delete_unclaimed_work(p_lo int, p_hi int, p_window_secs int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    WITH x AS (
        SELECT shard_id, resource_id, task_type FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi
           AND ((state = 'pending' AND claim_epoch = 0) OR state = 'done')
           AND enqueued_at < now() - make_interval(secs => p_window_secs)
         LIMIT p_limit FOR UPDATE SKIP LOCKED)
    DELETE FROM work_queue w USING x
     WHERE w.shard_id BETWEEN p_lo AND p_hi
       AND w.shard_id = x.shard_id AND w.resource_id = x.resource_id AND w.task_type = x.task_type;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- recount_inflight rewrites the kind_inflight partials for [p_lo, p_hi] from
-- the queue itself, erasing any drift. It takes each capped kind's claim lock
-- so the truth it writes cannot race a claim.
-- +goose StatementBegin
CREATE FUNCTION recount_inflight(p_lo int, p_hi int) RETURNS void
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
           AND w.kind = k.kind AND w.kind_version = k.kind_version;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- sweep_expired_orphans removes composer-dropped children whose grace window
-- elapsed without a re-emit ('infinity' = quarantined never matches).
-- +goose StatementBegin
CREATE FUNCTION sweep_expired_orphans(p_lo int, p_hi int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    WITH x AS (
        SELECT id FROM resources
         WHERE frozen_until < now() AND shard_id BETWEEN p_lo AND p_hi
         LIMIT p_limit FOR UPDATE SKIP LOCKED)
    DELETE FROM resources r USING x WHERE r.id = x.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- prune_resource_events keeps the newest p_keep events of each resource that
-- logged events after p_since_id, and returns the new watermark.
-- +goose StatementBegin
CREATE FUNCTION prune_resource_events(p_since_id bigint, p_keep int, p_limit int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_max bigint;
BEGIN
    SELECT max(id) INTO v_max FROM (SELECT id FROM resource_events WHERE id > p_since_id ORDER BY id LIMIT p_limit) x;
    IF v_max IS NULL THEN RETURN p_since_id; END IF;
    DELETE FROM resource_events e
     USING (SELECT DISTINCT resource_id FROM resource_events WHERE id > p_since_id AND id <= v_max) t
     WHERE e.resource_id = t.resource_id
       AND e.id < (SELECT x.id FROM resource_events x WHERE x.resource_id = t.resource_id
                    ORDER BY x.id DESC OFFSET p_keep - 1 LIMIT 1);
    RETURN v_max;
END
$$;
-- +goose StatementEnd

-- assign_member_shards ranks a member among the live members of its role and
-- tiles [0, p_total) into contiguous ranges by (rank, count); it returns the
-- member's range as [lo, hi], or NULLs if the member is not live.
-- +goose StatementBegin
CREATE FUNCTION assign_member_shards(p_member text, p_total int, p_liveness_secs int, OUT lo int, OUT hi int)
LANGUAGE plpgsql AS $$
DECLARE
    v_rank int;
    v_count int;
BEGIN
    WITH live AS (
        SELECT m.member_id, row_number() OVER (ORDER BY m.member_id) - 1 AS rnk
          FROM cluster_members m
         WHERE m.role = (SELECT role FROM cluster_members WHERE member_id = p_member)
           AND m.last_heartbeat > now() - make_interval(secs => p_liveness_secs))
    SELECT (SELECT rnk FROM live WHERE member_id = p_member), (SELECT count(*) FROM live)
      INTO v_rank, v_count;
    IF v_rank IS NULL THEN RETURN; END IF;
    lo := (v_rank * p_total) / v_count;
    hi := ((v_rank + 1) * p_total) / v_count - 1;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION cluster_members_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cluster_changed', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER cluster_members_changed AFTER INSERT OR DELETE ON cluster_members
    FOR EACH STATEMENT EXECUTE FUNCTION cluster_members_changed();

-- reconcile_now is the operator's "run it again": a pending task runs at
-- once with its attempts reset; a lagging resource is scheduled; a terminal
-- failure is lifted and retried; a settled resource re-runs its reaction
-- without a generation bump (a resync). Returns false if the resource is
-- frozen (orphaned, quarantined) or being deleted.
-- +goose StatementBegin
CREATE FUNCTION reconcile_now(p_id uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    r resources;
BEGIN
    SELECT * INTO r FROM resources WHERE id = p_id FOR UPDATE;
    IF NOT FOUND OR r.deletion_requested_at IS NOT NULL OR r.frozen_until IS NOT NULL THEN
        RETURN false;
    END IF;
    UPDATE work_queue SET not_before = now(), attempts = 0
     WHERE shard_id = r.shard_id AND resource_id = r.id AND task_type = 'reconcile' AND state = 'pending';
    IF FOUND THEN
        PERFORM notify_gated('work_ready');
    ELSIF r.synced_gen < r.generation THEN
        IF r.failure_terminal THEN
            UPDATE resources SET failure_terminal = false, failure_gen = 0 WHERE id = r.id;
        END IF;
        PERFORM schedule_eligible(ARRAY[r.id]);
    ELSE
        PERFORM enqueue_reconcile(ARRAY[r.id], ARRAY['resync']);
    END IF;
    INSERT INTO resource_events (resource_id, type, generation, message)
    VALUES (r.id, 'reconcile_requested', r.generation, 'an operator asked for a reconcile');
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER IF EXISTS cluster_members_changed ON cluster_members;
DROP FUNCTION IF EXISTS reconcile_now, cluster_members_changed, assign_member_shards, prune_resource_events,
    sweep_expired_orphans, recount_inflight, delete_unclaimed_work, requeue_lagging,
    reap_expired_leases, extend_leases, release_tasks;
