-- Every task's path is in its resource's event log: `scheduled` when a task
-- enters the queue (its trigger in the message) and `claimed` when a claimer
-- takes it (written by store.Claim in the claim's own statement), between
-- the `applied` and `succeeded`/`failed` events already recorded. A newer
-- generation folded into a task still pending adds no second `scheduled`:
-- the task that runs is the one already logged.

-- +goose Up
-- +goose StatementBegin
-- One statement-level trigger covers every way a task is queued (the
-- scheduling gate, an API create, a composer's new children): one INSERT
-- per statement, whatever its size.
CREATE FUNCTION work_queue_scheduled() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_events (resource_id, type, generation, message)
    SELECT resource_id, 'scheduled', generation, trigger FROM new_rows;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER work_queue_scheduled AFTER INSERT ON work_queue
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION work_queue_scheduled();

-- +goose Down
DROP TRIGGER work_queue_scheduled ON work_queue;
DROP FUNCTION work_queue_scheduled();
