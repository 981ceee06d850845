-- Resync: the drift engine. A kind version with resync_interval_secs > 0
-- has its settled resources re-pended on that interval with no generation
-- bump (trigger 'resync'), so its provider re-observes them and a health
-- that changed out of band shows (Degraded, Failed). kind_config is read on
-- every pass, so enabling, re-tuning or disabling resync is live.

-- schedule_resyncs re-pends up to p_limit settled, live resources of one
-- kind version in [p_lo, p_hi] whose last task was claimed more than an
-- interval ago. Each resource's interval is stretched by a fixed factor in
-- [0.9, 1.1) derived from its id, so resources created together (a bulk
-- import, a large composite) spread over a fifth of the interval instead of
-- firing at once, and stay spread. A resource with a task queued or in
-- flight is left alone.
CREATE OR REPLACE FUNCTION schedule_resyncs(p_kind text, p_kind_version smallint, p_lo int, p_hi int, p_limit int)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_interval int;
    v_ids uuid[];
BEGIN
    SELECT resync_interval_secs INTO v_interval
      FROM kind_config WHERE kind = p_kind AND kind_version = p_kind_version;
    IF coalesce(v_interval, 0) = 0 THEN RETURN 0; END IF;
    SELECT array_agg(id) INTO v_ids FROM (
        SELECT r.id FROM resources r
         WHERE r.kind = p_kind AND r.kind_version = p_kind_version
           AND r.shard_id BETWEEN p_lo AND p_hi
           AND r.synced_gen >= r.generation
           AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
           AND coalesce(r.last_claimed_at, r.created_at)
               < now() - make_interval(secs => v_interval * (0.9 + 0.2 * (hashtext(r.id::text) & 1023) / 1024.0))
           AND NOT EXISTS (SELECT 1 FROM work_queue w
                            WHERE w.shard_id = r.shard_id AND w.resource_id = r.id AND w.task_type = 'reconcile')
         LIMIT p_limit) x;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    RETURN enqueue_reconcile(v_ids, array_fill('resync'::text, ARRAY[cardinality(v_ids)]));
END
$$;
