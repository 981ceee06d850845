-- The event-log prune scales with activity, not with the log.
--
-- prune_resource_events found the events logged since its watermark with
-- ORDER BY id LIMIT on a table with no index on id: a scan and sort of the
-- whole log every reaper pass (1-9 s at 2.3M events). Its per-resource
-- cutoff was a correlated subquery evaluated for every event row instead of
-- once per resource (a prune of 12k resources x 150 surplus events: 66 s).
-- Every reaper pod also pruned every shard.
--
-- Now: an index on id (INCLUDE resource_id, so the window is an index-only
-- range scan); the window is an id range (p_since_id, p_since_id + p_limit]
-- capped at the sequence's last value, so no sort; each resource's cutoff is
-- found once (LATERAL); only the caller's shard range is pruned. A negative
-- p_since_id starts at the end of the log (a reaper that just started: a
-- resource it skipped is pruned the next time it logs). Measured, 12,000
-- resources with 250 events each: the first window deletes the 1.8M surplus
-- rows in 2.2 s; a 10,000-event window over 10,000 resources with nothing
-- left to delete takes 0.24 s once vacuumed (the cutoff walk, ~24 us per
-- resource at 100 events; 1.5 s while the deleted rows await VACUUM); an
-- idle pass 0.5 ms. The index costs each event insert ~1 us (480k-row
-- inserts: 3.0-4.1 us/row without it, 3.5-5.7 us with).

-- +goose Up
CREATE INDEX idx_resource_events_id ON resource_events (id) INCLUDE (resource_id);

DROP FUNCTION prune_resource_events(bigint, int, int);

-- prune_resource_events keeps the newest p_keep events of each resource in
-- shards [p_lo, p_hi] that logged an event with an id in
-- (p_since_id, p_since_id + p_limit]. It returns the window's upper end,
-- the watermark to pass next time, and the last id handed out, which the
-- caller reports its lag against.
-- +goose StatementBegin
CREATE FUNCTION prune_resource_events(p_lo int, p_hi int, p_since_id bigint, p_keep int, p_limit int,
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
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION prune_resource_events(int, int, bigint, int, int);
DROP INDEX idx_resource_events_id;

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
