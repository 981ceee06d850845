-- warm_session readies a new session for the engine's hot paths. A
-- session's first claim, completion and apply load the catalog entries of
-- every table they touch (work_queue and work_outbox are 16 partitions
-- each, with their indexes and statistics) and plan their statements: on a
-- fresh backend that costs many times a task's own work, paid by the first
-- tasks through it, and a pod's pool opens a backend per connection, at
-- start and at every recycle. Run when a connection opens (engine.WarmConn),
-- it moves that cost off the tasks' path.
--
-- Each call matches nothing (an empty shard range, empty arrays) and so
-- writes nothing; what it plans stays cached in the session.
CREATE OR REPLACE FUNCTION warm_session() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM * FROM claim_tasks('', 0, -1, '{}', NULL, 1, 1);
    PERFORM * FROM complete_tasks('{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', 1000, 300000);
    PERFORM apply_outcomes('{}', 0, -1, 1000, 300000);
    PERFORM * FROM extend_leases('{}', '{}', '{}', 1);
    PERFORM drain_outbox_batch(0, -1, 1, 1000, 300000);
    PERFORM 1 FROM resources WHERE id = ANY ('{}'::uuid[]);
END
$$;
