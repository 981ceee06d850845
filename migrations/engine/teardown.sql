-- Teardown: soft delete, then removal in reverse dependency order. A delete
-- marks a whole teardown tree (deletion_requested_at); each marked node is
-- removed only once nothing beneath it remains (no owned child, no
-- dependent): a node whose kind has a finalizer first runs its
-- deleteRequested reaction as a delete task, and applying its outcome removes it when
-- that succeeds (teardown_finish); a node without one is removed at once.
-- Removing a node unblocks its owner and its dependencies, which are
-- advanced in the same transaction, so dependents go before dependencies and
-- the root goes last. A teardown that keeps failing keeps its node, so
-- everything above it stays Deleting: a stuck child is surfaced, never
-- orphaned.

-- kind_finalizer is the finalizer a kind version's nodes carry while being
-- torn down: its deleteRequested reaction's, or the manifest's
-- finalizer_name; NULL when the kind has no teardown.
CREATE OR REPLACE FUNCTION kind_finalizer(m kind_manifest) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN m.delete_reaction IS NOT NULL THEN coalesce(
        nullif(jsonb_path_query_first(m.reactions, '$[*] ? (@.trigger == "deleteRequested")') ->> 'finalizer', ''),
        nullif(m.finalizer_name, ''), m.delete_reaction) END
$$;

-- request_deletion marks the teardown tree of p_ids: the resources
-- themselves, everything they own, and every resource that depends on any
-- of it, transitively (UNION makes the walk cycle-safe). Each newly marked
-- node takes its kind's finalizer, loses a pending reconcile (a claimed one
-- finishes; its outcome no longer matters) and its pending operations
-- (cancelled: a verb on something being torn down would act on nothing),
-- and leaves orphan grace (an
-- orphan's timer would otherwise sweep it again); a quarantine stays, as the
-- phase shows Deleting first anyway. Returns how many it marked; the tree's
-- ready nodes are advanced at once.
CREATE OR REPLACE FUNCTION request_deletion(p_ids uuid[], p_message text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_marked uuid[];
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN RETURN 0; END IF;
    WITH RECURSIVE tree(id) AS (
        SELECT unnest(p_ids)
        UNION
        SELECT x.id FROM tree t CROSS JOIN LATERAL (
            SELECT c.id FROM resources c WHERE c.owner_id = t.id
            UNION ALL
            SELECT d.dependent_id FROM resource_deps d WHERE d.dependency_id = t.id) x
    ), marked AS (
        UPDATE resources r SET
            deletion_requested_at = now(),
            finalizers = CASE WHEN kind_finalizer(m) IS NULL THEN '{}' ELSE ARRAY[kind_finalizer(m)] END,
            frozen_until = CASE WHEN r.frozen_until = 'infinity' THEN r.frozen_until END
          FROM tree t, kind_manifest m
         WHERE r.id = t.id AND m.kind = r.kind AND m.kind_version = r.kind_version
           AND r.deletion_requested_at IS NULL
        RETURNING r.id, r.shard_id
    ), dropped AS (
        DELETE FROM work_queue w USING marked k
         WHERE w.shard_id = k.shard_id AND w.resource_id = k.id
           AND w.task_type IN ('reconcile', 'operate') AND w.state = 'pending'
    )
    SELECT array_agg(id) INTO v_marked FROM marked;
    IF v_marked IS NULL THEN RETURN 0; END IF;
    UPDATE resource_operations SET state = 'cancelled', error = 'the resource is being deleted',
           updated_at = now(), finished_at = now()
     WHERE resource_id = ANY (v_marked) AND state = 'pending';
    PERFORM log_events(v_marked, 'deletion_requested', p_message);
    PERFORM teardown_advance(v_marked);
    RETURN cardinality(v_marked);
END
$$;

-- teardown_advance moves every marked node of p_ids that nothing blocks any
-- more: no owned child and no dependent left. A node with a finalizer gets
-- its delete task (once; a terminal teardown failure waits for an
-- operator's reconcile); a node without one is removed, and its owner and
-- dependencies are advanced in turn, so a ready subtree collapses in one
-- call.
CREATE OR REPLACE FUNCTION teardown_advance(p_ids uuid[]) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[] := p_ids;
    v_removed int := 0;
    v_next uuid[];
    n int;
BEGIN
    WHILE v_ids IS NOT NULL AND cardinality(v_ids) > 0 LOOP
        -- A scratch table of its own name per shape: a session that made an
        -- older engine's (teardown_ready, without namespace) keeps it.
        CREATE TEMP TABLE IF NOT EXISTS teardown_batch (id uuid, shard_id smallint, kind text, kind_version smallint,
            generation bigint, fin boolean, namespace text) ON COMMIT DELETE ROWS;
        TRUNCATE teardown_batch;
        INSERT INTO teardown_batch
        SELECT r.id, r.shard_id, r.kind, r.kind_version, r.generation, cardinality(r.finalizers) > 0, r.namespace
          FROM resources r
         WHERE r.id = ANY (v_ids) AND r.deletion_requested_at IS NOT NULL
           AND NOT (r.failure_terminal AND r.failure_gen = r.generation)
           AND NOT EXISTS (SELECT 1 FROM resources c WHERE c.owner_id = r.id)
           AND NOT EXISTS (SELECT 1 FROM resource_deps d WHERE d.dependency_id = r.id);

        WITH q AS (
            INSERT INTO work_queue (shard_id, resource_id, task_type, kind, kind_version, generation, trigger, namespace)
            SELECT shard_id, id, 'delete', kind, kind_version, generation, 'deleteRequested', namespace
              FROM teardown_batch WHERE fin
            ON CONFLICT (shard_id, resource_id, task_type) DO NOTHING
            RETURNING 1)
        SELECT count(*) INTO n FROM q;
        IF n > 0 THEN
            PERFORM notify_gated('work_ready');
        END IF;

        SELECT array_agg(DISTINCT x.id) INTO v_next FROM (
            SELECT r.owner_id AS id FROM resources r JOIN teardown_batch t ON t.id = r.id
             WHERE NOT t.fin AND r.owner_id IS NOT NULL
            UNION ALL
            SELECT d.dependency_id FROM resource_deps d JOIN teardown_batch t ON t.id = d.dependent_id
             WHERE NOT t.fin) x;
        DELETE FROM resources r USING teardown_batch t WHERE r.id = t.id AND NOT t.fin;
        GET DIAGNOSTICS n = ROW_COUNT;
        v_removed := v_removed + n;
        v_ids := teardown_lock(v_next);
    END LOOP;
    RETURN v_removed;
END
$$;

-- teardown_lock locks the marked nodes among p_ids (in id order, so two
-- transactions lock them alike) and returns them. A node's last two
-- children may finish in concurrent transactions; each then waits here for
-- the other, and the one that goes second reads, in its next statement,
-- that no child is left. Without the lock each would see the other's child
-- and neither would advance the node.
CREATE OR REPLACE FUNCTION teardown_lock(p_ids uuid[]) RETURNS uuid[]
LANGUAGE sql AS $$
    SELECT array_agg(id) FROM (
        SELECT id FROM resources
         WHERE id = ANY (p_ids) AND deletion_requested_at IS NOT NULL
         ORDER BY id FOR UPDATE) x
$$;

-- teardown_finish removes nodes whose delete task succeeded (their
-- finalizer is done) and advances what they unblocked: their owners and
-- their dependencies.
CREATE OR REPLACE FUNCTION teardown_finish(p_ids uuid[]) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_up uuid[];
    n int;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN RETURN 0; END IF;
    SELECT array_agg(DISTINCT x.id) INTO v_up FROM (
        SELECT owner_id AS id FROM resources WHERE id = ANY (p_ids) AND owner_id IS NOT NULL
        UNION ALL
        SELECT dependency_id FROM resource_deps WHERE dependent_id = ANY (p_ids)) x;
    v_up := teardown_lock(v_up);
    DELETE FROM resources WHERE id = ANY (p_ids) AND deletion_requested_at IS NOT NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM teardown_advance(v_up);
    RETURN n;
END
$$;

-- requeue_teardown is the teardown's crash-recovery backstop (the queue is
-- UNLOGGED, and a wake may be missed): marked nodes in [p_lo, p_hi] with no
-- delete task, untouched for p_window_secs, are advanced again. It probes
-- idx_resources_deleting, empty on a fleet that deletes nothing.
CREATE OR REPLACE FUNCTION requeue_teardown(p_lo int, p_hi int, p_window_secs int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    SELECT array_agg(id) INTO v_ids FROM (
        SELECT r.id FROM resources r
         WHERE r.shard_id BETWEEN p_lo AND p_hi
           AND r.deletion_requested_at IS NOT NULL
           AND r.updated_at < now() - make_interval(secs => p_window_secs)
           AND NOT EXISTS (SELECT 1 FROM work_queue w
                            WHERE w.shard_id = r.shard_id AND w.resource_id = r.id AND w.task_type = 'delete')
         LIMIT p_limit) x;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    PERFORM teardown_advance(teardown_lock(v_ids));
    RETURN cardinality(v_ids);
END
$$;
