-- The per-resource event log: appended on the hot path (resource_events has
-- one index per insert, and no foreign key), pruned by the reaper.

-- log_events appends one event per resource id.
CREATE OR REPLACE FUNCTION log_events(p_ids uuid[], p_type text, p_message text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO resource_events (resource_id, type, generation, message)
    SELECT r.id, p_type, r.generation, p_message FROM resources r WHERE r.id = ANY (p_ids)
$$;

-- prune_resource_events keeps the newest p_keep events of each resource in
-- shards [p_lo, p_hi] that logged an event with an id in
-- (p_since_id, p_since_id + p_limit]. It returns the window's upper end,
-- the watermark to pass next time, and the last id handed out, which the
-- caller reports its lag against. A negative p_since_id starts at the end of
-- the log (a reaper that just started: a resource it skipped is pruned the
-- next time it logs).
--
-- It scales with activity, not with the log: the window is an id range
-- capped at the sequence's last value (an index-only range scan of
-- idx_resource_events_id, no sort), and each resource's cutoff is found once
-- (LATERAL). A window's cost follows the events it holds, and an idle pass
-- reads next to nothing.
CREATE OR REPLACE FUNCTION prune_resource_events(p_lo int, p_hi int, p_since_id bigint, p_keep int, p_limit int,
                                      OUT watermark bigint, OUT last_id bigint)
LANGUAGE plpgsql AS $$
BEGIN
    -- An id handed out but not yet committed is passed over, and its
    -- resource pruned the next time it logs.
    last_id := coalesce(pg_sequence_last_value(pg_get_serial_sequence('resource_events', 'id')::regclass), 0);
    IF p_since_id < 0 THEN
        p_since_id := GREATEST(last_id - p_limit, 0);
    END IF;
    watermark := LEAST(p_since_id + p_limit, last_id);
    IF watermark <= p_since_id THEN
        watermark := p_since_id;
        RETURN;
    END IF;
    WITH t AS (
        SELECT DISTINCT resource_id FROM resource_events
         WHERE id > p_since_id AND id <= watermark AND shard_of(resource_id) BETWEEN p_lo AND p_hi
    ), cut AS (
        SELECT t.resource_id, c.id
          FROM t CROSS JOIN LATERAL (
                SELECT x.id FROM resource_events x WHERE x.resource_id = t.resource_id
                 ORDER BY x.id DESC OFFSET p_keep - 1 LIMIT 1) c
    )
    DELETE FROM resource_events e USING cut
     WHERE e.resource_id = cut.resource_id AND e.id < cut.id;
END
$$;
