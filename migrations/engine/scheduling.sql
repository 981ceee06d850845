-- Scheduling: the gate that decides which resource gets a reconcile task, the
-- upsert that makes scheduling idempotent, the cascade that makes it reactive,
-- and the operator's "run it again".
--
-- Scheduling runs once per apply, so its plan is cached: a custom plan per
-- call (the default for array parameters) re-plans a partitioned INSERT ...
-- ON CONFLICT every time, which costs more than the insert. Every lookup is
-- keyed (id = ANY), so the generic plan is as good as a custom one.

-- enqueue_tasks upserts reconcile rows for resources the caller has read
-- (shard, id, kind, version, generation, trigger, namespace), so scheduling reads each
-- resource once: the gate reads it to decide, and the upsert takes the
-- columns from the gate (re-reading 10,000 resources by id cost the gate's
-- own read again). The ON CONFLICT arm is the generation gate that makes
-- scheduling idempotent: a newer generation supersedes a pending one, and a
-- claimed row is only marked so applying its outcome re-evaluates it (never two live
-- tasks for one resource).
CREATE OR REPLACE FUNCTION enqueue_tasks(p_shards smallint[], p_ids uuid[], p_kinds text[], p_vers smallint[],
                                         p_gens bigint[], p_triggers text[], p_namespaces text[]) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n int;
BEGIN
    -- Most rows are new (applying an outcome deletes a finished task's row), and a plain insert
    -- costs about half an INSERT ... ON CONFLICT, whose speculative
    -- insertion probes, inserts and confirms each row. The plain insert is
    -- tried first; if any row exists, its unique violation undoes the
    -- attempt (this block's subtransaction) and the upsert below runs.
    BEGIN
        INSERT INTO work_queue (shard_id, resource_id, task_type, kind, kind_version, generation, trigger, namespace)
        SELECT c.shard_id, c.id, 'reconcile', c.kind, c.kind_version, c.generation, c.trig, c.ns
          FROM unnest(p_shards, p_ids, p_kinds, p_vers, p_gens, p_triggers, p_namespaces)
               AS c(shard_id, id, kind, kind_version, generation, trig, ns);
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 THEN
            PERFORM notify_gated('work_ready');
        END IF;
        RETURN n;
    EXCEPTION WHEN unique_violation THEN
        NULL; -- some row exists: upsert them all
    END;
    WITH up AS (
        INSERT INTO work_queue AS w (shard_id, resource_id, task_type, kind, kind_version, generation, trigger, namespace)
        SELECT c.shard_id, c.id, 'reconcile', c.kind, c.kind_version, c.generation, c.trig, c.ns
          FROM unnest(p_shards, p_ids, p_kinds, p_vers, p_gens, p_triggers, p_namespaces)
               AS c(shard_id, id, kind, kind_version, generation, trig, ns)
        ON CONFLICT (shard_id, resource_id, task_type) DO UPDATE SET
            generation   = GREATEST(w.generation, EXCLUDED.generation),
            kind         = CASE WHEN w.state = 'pending' THEN EXCLUDED.kind ELSE w.kind END,
            kind_version = CASE WHEN w.state = 'pending' THEN EXCLUDED.kind_version ELSE w.kind_version END,
            trigger      = CASE WHEN w.state = 'pending' THEN EXCLUDED.trigger ELSE w.trigger END,
            -- A newer generation's task continues the trace of the request
            -- that made it (the column's default, migration 00031).
            traceparent  = CASE WHEN EXCLUDED.generation > w.generation THEN EXCLUDED.traceparent ELSE w.traceparent END,
            rollup_dirty = w.rollup_dirty OR (w.state = 'claimed' AND EXCLUDED.trigger = 'childrenSettled'),
            attempts     = CASE WHEN EXCLUDED.generation > w.generation THEN 0 ELSE w.attempts END,
            not_before   = CASE WHEN w.state = 'pending' AND EXCLUDED.generation > w.generation
                                THEN now() ELSE w.not_before END
        WHERE EXCLUDED.generation > w.generation
           OR (w.state = 'pending' AND w.trigger <> EXCLUDED.trigger)
           OR (w.state = 'claimed' AND EXCLUDED.trigger = 'childrenSettled' AND NOT w.rollup_dirty)
        RETURNING w.state
    )
    SELECT count(*) FILTER (WHERE state = 'pending') INTO n FROM up;
    IF n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN n;
END
$$;

-- enqueue_reconcile is enqueue_tasks for callers holding only ids.
CREATE OR REPLACE FUNCTION enqueue_reconcile(p_ids uuid[], p_triggers text[]) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_shards smallint[];
    v_ids uuid[];
    v_kinds text[];
    v_vers smallint[];
    v_gens bigint[];
    v_trigs text[];
    v_nss text[];
BEGIN
    -- The resources are read in one scan by id = ANY, then joined to the
    -- triggers: with the two in one join, the planner may probe the primary
    -- key per id with id = ANY as a second index condition, which walks the
    -- whole array on every probe (quadratic in the batch).
    WITH r AS MATERIALIZED (
        SELECT id, shard_id, kind, kind_version, generation, namespace FROM resources WHERE id = ANY (p_ids)
    )
    SELECT array_agg(r.shard_id), array_agg(r.id), array_agg(r.kind), array_agg(r.kind_version), array_agg(r.generation), array_agg(t.trig),
           array_agg(r.namespace)
      INTO v_shards, v_ids, v_kinds, v_vers, v_gens, v_trigs, v_nss
      FROM unnest(p_ids, p_triggers) AS t(id, trig)
      JOIN r ON r.id = t.id;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    RETURN enqueue_tasks(v_shards, v_ids, v_kinds, v_vers, v_gens, v_trigs, v_nss);
END
$$;

-- schedule_eligible is the gate. A resource gets a reconcile task when it lags
-- (generation > synced_gen), is live (not deleting, not frozen, not terminally
-- failed for this generation), and either its specChange reaction is due and
-- every upstream is synced, or its rollup is due and no child still progresses.
-- A kind with nothing to run is synced on the spot. Each resource's
-- eligibility is evaluated once (c is materialized), not once for each
-- expression that reads it.
-- Like apply_items, it plans without sequential scans: a plan kept from a
-- small table read every resource per call.
CREATE OR REPLACE FUNCTION schedule_eligible(p_ids uuid[]) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_shards smallint[];
    v_ids uuid[];
    v_kinds text[];
    v_vers smallint[];
    v_gens bigint[];
    v_trigs text[];
    v_nss text[];
    v_noop uuid[];
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN RETURN 0; END IF;
    -- t is the batch, read by primary key. (MATERIALIZED since a partial
    -- index on lagging resources, since dropped, was walked with id = ANY
    -- as a filter: O(every lagging resource) per call. The fence is free.)
    -- c is materialized too: inlined, its trig CASE (two EXISTS probes) is
    -- copied into each of the four expressions that read trig below.
    -- blocked is the batch's resources with a lagging upstream, found in
    -- one pass and probed by hash: an EXISTS per resource cost a bitmap
    -- probe of resource_deps each, even when it held nothing, and those
    -- probes were a large part of the gate.
    WITH t AS MATERIALIZED (
        SELECT * FROM resources WHERE id = ANY (p_ids)
    ), blocked AS MATERIALIZED (
        SELECT d.dependent_id AS id
          FROM resource_deps d JOIN resources u ON u.id = d.dependency_id
         WHERE d.dependent_id = ANY (p_ids) AND u.synced_gen < u.generation
    ), c AS MATERIALIZED (
        SELECT r.id, r.shard_id, r.kind, r.kind_version, r.generation, r.namespace,
            CASE
                WHEN r.spec_gen < r.generation AND m.spec_reaction IS NOT NULL THEN
                    CASE WHEN r.id NOT IN (SELECT b.id FROM blocked b) THEN 'specChange' END
                WHEN m.rollup_reaction IS NOT NULL THEN
                    CASE WHEN NOT EXISTS (
                        SELECT 1 FROM resources ch
                        WHERE ch.owner_id = r.id AND ch.synced_gen < ch.generation
                          AND ch.failure_gen <> ch.generation AND ch.frozen_until IS NULL AND ch.deletion_requested_at IS NULL)
                    THEN 'childrenSettled' END
                ELSE 'noop'
            END AS trig
        FROM t r
        JOIN kind_manifest m ON m.kind = r.kind AND m.kind_version = r.kind_version
        WHERE r.synced_gen < r.generation
          AND r.deletion_requested_at IS NULL
          AND r.frozen_until IS NULL
          AND NOT (r.failure_gen = r.generation AND r.failure_terminal)
    )
    SELECT array_agg(shard_id) FILTER (WHERE trig IN ('specChange','childrenSettled')),
           array_agg(id) FILTER (WHERE trig IN ('specChange','childrenSettled')),
           array_agg(kind) FILTER (WHERE trig IN ('specChange','childrenSettled')),
           array_agg(kind_version) FILTER (WHERE trig IN ('specChange','childrenSettled')),
           array_agg(generation) FILTER (WHERE trig IN ('specChange','childrenSettled')),
           array_agg(trig) FILTER (WHERE trig IN ('specChange','childrenSettled')),
           array_agg(namespace) FILTER (WHERE trig IN ('specChange','childrenSettled')),
           array_agg(id) FILTER (WHERE trig = 'noop')
      INTO v_shards, v_ids, v_kinds, v_vers, v_gens, v_trigs, v_nss, v_noop
      FROM c;
    IF v_noop IS NOT NULL THEN
        UPDATE resources SET spec_gen = generation, synced_gen = generation WHERE id = ANY (v_noop);
    END IF;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    RETURN enqueue_tasks(v_shards, v_ids, v_kinds, v_vers, v_gens, v_trigs, v_nss);
END
$$;

-- schedule_applied schedules the resource an API apply just wrote. A
-- resource this transaction created has no dependencies and no task yet, so
-- it takes one plain insert (the hot path of a bulk import); anything else
-- goes through schedule_eligible. A created resource is also the 'created'
-- lifecycle edge.
CREATE OR REPLACE FUNCTION schedule_applied(p_ns text, p_kind text, p_name text) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    r record;
BEGIN
    SELECT res.id, res.shard_id, res.kind, res.kind_version, res.generation,
           res.created_at = now() AND res.generation = 1 AS fresh, m.spec_reaction
      INTO r
      FROM resources res
      JOIN kind_manifest m ON m.kind = res.kind AND m.kind_version = res.kind_version
     WHERE res.namespace = p_ns AND res.kind = p_kind AND res.name = p_name
       AND res.updated_at = now() AND res.synced_gen < res.generation;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF r.fresh THEN
        PERFORM emit_lifecycle(ARRAY[r.id], 'created');
    END IF;
    IF r.fresh AND r.spec_reaction IS NOT NULL THEN
        INSERT INTO work_queue (shard_id, resource_id, task_type, kind, kind_version, generation, trigger, namespace)
        VALUES (r.shard_id, r.id, 'reconcile', r.kind, r.kind_version, r.generation, 'specChange', p_ns);
        PERFORM notify_gated('work_ready');
        RETURN 1;
    END IF;
    RETURN schedule_eligible(ARRAY[r.id]);
END
$$;

-- schedule_applied_batch is schedule_applied for every (kind, name) in
-- namespace p_ns of one bulk-apply chunk, set-based: the same gate (written by this transaction,
-- lagging), the 'created' edge for the fresh ones, one plain insert for the
-- fresh ones with a specChange reaction, schedule_eligible for the rest.
CREATE OR REPLACE FUNCTION schedule_applied_batch(p_ns text, p_kinds text[], p_names text[]) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_fresh uuid[];
    v_rest uuid[];
    n int;
BEGIN
    -- The chunk's resources are found first, by (kind, name), on their own:
    -- joined in one step with kind_manifest, the planner probed the
    -- (kind, name) index by kind alone after joining the manifest, reading
    -- every resource of the kind for each item: a chunk's cost grew with
    -- the kind's size times the chunk's.
    WITH w AS MATERIALIZED (
        SELECT res.id, res.shard_id, res.kind, res.kind_version, res.generation,
               res.created_at = now() AND res.generation = 1 AS fresh
          FROM unnest(p_kinds, p_names) AS a(kind, name)
          JOIN resources res ON res.namespace = p_ns AND res.kind = a.kind AND res.name = a.name
         WHERE res.updated_at = now() AND res.synced_gen < res.generation
    ), r AS MATERIALIZED (
        SELECT w.*, m.spec_reaction
          FROM w JOIN kind_manifest m ON m.kind = w.kind AND m.kind_version = w.kind_version
    ), q AS (
        INSERT INTO work_queue (shard_id, resource_id, task_type, kind, kind_version, generation, trigger, namespace)
        SELECT shard_id, id, 'reconcile', kind, kind_version, generation, 'specChange', p_ns
          FROM r WHERE fresh AND spec_reaction IS NOT NULL
        RETURNING 1
    )
    SELECT array_agg(id) FILTER (WHERE fresh),
           array_agg(id) FILTER (WHERE NOT (fresh AND spec_reaction IS NOT NULL)),
           (SELECT count(*) FROM q)
      INTO v_fresh, v_rest, n
      FROM r;
    PERFORM emit_lifecycle(v_fresh, 'created');
    IF n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN n + schedule_eligible(v_rest);
END
$$;

-- cascade_on_ready_change makes scheduling reactive: when a statement syncs a
-- resource, its direct dependents are scheduled; when a child syncs, fails or
-- flips health, its composite root's rollup re-runs (promotion and demotion).
-- The same edges are the 'synced', 'failed' and 'degraded' lifecycle
-- transitions reactor bindings watch; they are collected only when some
-- enabled binding watches one of them (one probe otherwise).
CREATE OR REPLACE FUNCTION cascade_on_ready_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_deps uuid[];
    v_roots uuid[];
    v_synced uuid[];
    v_failed uuid[];
    v_degraded uuid[];
BEGIN
    -- An upsert that only inserted still fires the UPDATE statement trigger.
    IF NOT EXISTS (SELECT 1 FROM new_rows) THEN
        RETURN NULL;
    END IF;
    -- EXECUTE plans the join for this statement's transition tables: a
    -- cached plan is made once per session (the query has no parameters),
    -- and one made for a 1-row update nested-loops over a 2,000-row drain
    -- batch: quadratic in the batch.
    EXECUTE $q$
    WITH ch AS (
        SELECT n.id, n.owner_id,
            (n.synced_gen >= n.generation AND n.synced_gen > o.synced_gen) AS synced_edge,
            (n.failure_gen = n.generation AND o.failure_gen <> o.generation) AS failed_edge,
            (n.health_ok <> o.health_ok) AS health_edge
        FROM new_rows n JOIN old_rows o ON o.id = n.id
    ), e AS (
        SELECT * FROM ch WHERE synced_edge OR failed_edge OR health_edge
    )
    SELECT (SELECT array_agg(DISTINCT d.dependent_id) FROM e JOIN resource_deps d ON d.dependency_id = e.id WHERE e.synced_edge),
           (SELECT array_agg(DISTINCT e.owner_id) FROM e WHERE e.owner_id IS NOT NULL)
    $q$ INTO v_deps, v_roots;
    IF v_deps IS NOT NULL THEN
        PERFORM schedule_eligible(v_deps);
    END IF;
    IF v_roots IS NOT NULL THEN
        PERFORM schedule_rollup(v_roots);
    END IF;
    IF EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition IN ('synced','failed','degraded')) THEN
        EXECUTE $q$
        SELECT array_agg(n.id) FILTER (WHERE n.synced_gen >= n.generation AND n.synced_gen > o.synced_gen),
               array_agg(n.id) FILTER (WHERE n.failure_gen = n.generation AND o.failure_gen <> o.generation),
               array_agg(n.id) FILTER (WHERE o.health_ok AND NOT n.health_ok)
          FROM new_rows n JOIN old_rows o ON o.id = n.id
        $q$ INTO v_synced, v_failed, v_degraded;
        PERFORM emit_lifecycle(v_synced, 'synced');
        PERFORM emit_lifecycle(v_failed, 'failed');
        PERFORM emit_lifecycle(v_degraded, 'degraded');
    END IF;
    IF EXISTS (SELECT 1 FROM alert_sinks WHERE enabled AND 'resource.failed' = ANY (event_types)) THEN
        EXECUTE $q$
        SELECT array_agg(n.id) FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE n.failure_gen = n.generation AND n.failure_terminal
           AND NOT (o.failure_gen = o.generation AND o.failure_terminal)
        $q$ INTO v_failed;
        PERFORM emit_resource_failed_alerts(v_failed);
    END IF;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER cascade_on_ready_change AFTER UPDATE ON resources
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION cascade_on_ready_change();

-- reconcile_now is the operator's "run it again": a pending task runs at
-- once with its attempts reset; a lagging resource is scheduled; a terminal
-- failure is lifted and retried; a settled resource re-runs its reaction
-- without a generation bump (a resync). On a resource being deleted it
-- retries the teardown: a failed one (terminal too) runs again at once.
-- Returns false if the resource is frozen (orphaned, quarantined) and not
-- being deleted.
CREATE OR REPLACE FUNCTION reconcile_now(p_id uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    r resources;
BEGIN
    SELECT * INTO r FROM resources WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF r.deletion_requested_at IS NOT NULL THEN
        IF r.failure_terminal THEN
            UPDATE resources SET failure_terminal = false, failure_gen = 0 WHERE id = r.id;
        END IF;
        INSERT INTO resource_events (resource_id, type, generation, message)
        VALUES (r.id, 'reconcile_requested', r.generation, 'an operator asked to retry the teardown');
        UPDATE work_queue SET not_before = now(), attempts = 0
         WHERE shard_id = r.shard_id AND resource_id = r.id AND task_type = 'delete' AND state = 'pending';
        IF FOUND THEN
            PERFORM notify_gated('work_ready');
        ELSE
            PERFORM teardown_advance(ARRAY[r.id]);
        END IF;
        RETURN true;
    END IF;
    IF r.frozen_until IS NOT NULL THEN
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
