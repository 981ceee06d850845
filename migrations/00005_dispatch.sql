-- Push dispatch: the endpoint registry's wakeup and the async-delivery
-- timeout. The endpoints and endpoint_deliveries tables are in 00001_core.sql.

-- +goose Up

-- Every dispatch pod keeps a live copy of the endpoints table; a change wakes
-- them all at once instead of waiting for their failsafe re-read. The payload
-- is empty: a wake is a hint to re-read, never the data.
-- +goose StatementBegin
CREATE FUNCTION endpoints_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('endpoints_changed', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER endpoints_changed AFTER INSERT OR UPDATE OR DELETE ON endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION endpoints_changed();

-- expire_async_tasks ends asynchronous deliveries (the provider answered 202)
-- whose lease lapsed without a callback: each task still claimed at its epoch
-- with lease_until <= now() is completed with a transient error (an attempt
-- is burnt and the drain backs it off), under a row lock so a heartbeat that
-- races it either lands first (the lease moved: 'held') or finds the task
-- completed. It returns one row per input: 'expired' (completed now), 'held'
-- (still claimed; lease_until says until when) or 'gone' (completed by a
-- callback, superseded, or removed).
-- +goose StatementBegin
CREATE FUNCTION expire_async_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_message text)
RETURNS TABLE (task_id uuid, state text, lease_until timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
    v_shards smallint[];
    v_epochs bigint[];
    n int;
BEGIN
    SELECT array_agg(c.task_id), array_agg(c.shard_id), array_agg(c.claim_epoch)
      INTO v_ids, v_shards, v_epochs
      FROM (SELECT w.task_id, w.shard_id, w.claim_epoch
              FROM work_queue w
              JOIN unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
                ON w.shard_id = i.shard_id AND w.task_id = i.task_id
             WHERE w.claim_epoch = i.epoch AND w.state = 'claimed' AND w.lease_until <= now()
               FOR UPDATE OF w) c;
    IF v_ids IS NOT NULL THEN
        n := cardinality(v_ids);
        PERFORM complete_tasks(v_ids, v_shards, v_epochs,
            array_fill(NULL::jsonb, ARRAY[n]), array_fill(p_message, ARRAY[n]), array_fill(false, ARRAY[n]));
    END IF;
    RETURN QUERY
    SELECT i.task_id,
           CASE WHEN i.task_id = ANY (coalesce(v_ids, '{}')) THEN 'expired'
                WHEN w.state = 'claimed' AND w.claim_epoch = i.epoch THEN 'held'
                ELSE 'gone' END,
           CASE WHEN w.state = 'claimed' AND w.claim_epoch = i.epoch THEN w.lease_until END
      FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
      LEFT JOIN work_queue w ON w.shard_id = i.shard_id AND w.task_id = i.task_id;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS expire_async_tasks;
DROP TRIGGER IF EXISTS endpoints_changed ON endpoints;
DROP FUNCTION IF EXISTS endpoints_changed;
