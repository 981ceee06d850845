-- The apply: task outcomes to work rows and resources. complete_tasks
-- applies an outcome where it arrives (a plain success in complete_plain;
-- any other in finish_successes or finish_work, then apply_items); the
-- drain applies the outcomes that compose, from work_outbox
-- (apply_outcomes: the composition, then the same two steps).
-- The resources UPDATE touches no indexed column and the table keeps 30% of
-- each page free, so the update is HOT.

-- drain_outbox_batch pops up to p_limit outcomes in [p_lo, p_hi] and applies
-- them (apply_outcomes). The outbox holds the outcomes that compose:
-- complete_tasks applies every other outcome in its own transaction.
CREATE OR REPLACE FUNCTION drain_outbox_batch(p_lo int, p_hi int, p_limit int, p_retry_base_ms int, p_retry_max_ms int)
RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_out work_outbox[];
    v_tids tid[];
    v_tabs oid[];
BEGIN
    -- Pop by TID: lock the batch, then delete exactly those tuples. Joining
    -- the batch back by key planned as a hash join over the whole outbox,
    -- once per batch, which grew with the backlog.
    SELECT array_agg(ctid), array_agg(tableoid) INTO v_tids, v_tabs
      FROM (SELECT ctid, tableoid FROM work_outbox
             WHERE shard_id BETWEEN p_lo AND p_hi
             LIMIT p_limit FOR UPDATE SKIP LOCKED) s;
    IF v_tids IS NULL THEN RETURN 0; END IF;
    WITH d AS (
        DELETE FROM work_outbox x
         WHERE x.shard_id BETWEEN p_lo AND p_hi
           AND x.ctid = ANY (v_tids)
           AND (x.tableoid, x.ctid) IN (SELECT * FROM unnest(v_tabs, v_tids))
        RETURNING x)
    -- The table's own row type (RETURNING x), not RETURNING x.*: a CTE's
    -- row is an anonymous record, and plpgsql casts record[] to
    -- work_outbox[] through text, which re-parsed every outcome's jsonb (a
    -- composer's outcome of megabytes: a large share of a compose drain).
    SELECT array_agg(d.x ORDER BY (d.x).id) INTO v_out FROM d;
    IF v_out IS NULL THEN RETURN 0; END IF;
    RETURN apply_outcomes(v_out, p_lo, p_hi, p_retry_base_ms, p_retry_max_ms);
END
$$;

-- apply_outcomes applies task outcomes whose work rows lie in [p_lo, p_hi]:
-- composition first (its failure becomes a terminal failure), then the
-- work rows (finish_work), then the resources (apply_items). An outcome
-- whose work row is no longer claimed at its epoch is dropped.
CREATE OR REPLACE FUNCTION apply_outcomes(p_out work_outbox[], p_lo int, p_hi int, p_retry_base_ms int, p_retry_max_ms int)
RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    o work_outbox;
    v_fail_ids uuid[] := '{}';
    v_fail_msgs text[] := '{}';
BEGIN
    -- Composition, one root at a time, for outcomes whose claim still holds;
    -- a bad outcome fails only its own task.
    FOR o IN
        SELECT x.* FROM unnest(p_out) x
          JOIN work_queue w ON w.shard_id = x.shard_id AND w.resource_id = x.resource_id AND w.task_type = x.task_type
         WHERE outcome_composes(x.emits, x.error, x.outcome)
           AND w.claim_epoch = x.claim_epoch AND w.state = 'claimed'
         ORDER BY x.id
    LOOP
        BEGIN
            PERFORM apply_compose(o.resource_id, o.outcome, o.emits);
        EXCEPTION
            -- A deadlock is the moment's, not the outcome's: the drain
            -- runs again (apply_compose locks upstreams a completion may
            -- hold).
            WHEN deadlock_detected THEN RAISE;
            WHEN OTHERS THEN
                v_fail_ids := v_fail_ids || o.task_id;
                v_fail_msgs := v_fail_msgs || ('composition rejected: ' || SQLERRM);
        END;
    END LOOP;
    RETURN apply_items(finish_work(p_out, v_fail_ids, v_fail_msgs, p_lo, p_hi, p_retry_base_ms, p_retry_max_ms));
END
$$;

-- finish_work finalises the work rows of outcomes whose rows lie in
-- [p_lo, p_hi] and returns them as drain_items; p_fail_ids/p_fail_msgs turn
-- an outcome into a terminal failure (a rejected composition).
CREATE OR REPLACE FUNCTION finish_work(p_out work_outbox[], p_fail_ids uuid[], p_fail_msgs text[], p_lo int, p_hi int,
                                       p_retry_base_ms int, p_retry_max_ms int)
RETURNS drain_item[]
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_items drain_item[];
BEGIN
    -- Finalise the work rows still claimed at each outcome's epoch (a stale
    -- outcome matches none and is dropped): a transient failure re-pends
    -- its row with a jittered backoff; anything else deletes it. The
    -- conditions read the row itself, so a concurrent re-schedule that
    -- bumped its generation is seen (EvalPlanQual) and becomes a rerun.
    WITH src AS (
        SELECT x.*, coalesce(f.msg, x.error) AS err, (f.msg IS NOT NULL OR x.terminal) AS term0,
               coalesce(kc.max_transient_attempts, 0) AS max_attempts, m.rollup_reaction IS NOT NULL AS has_rollup
          FROM unnest(p_out) x
          LEFT JOIN unnest(p_fail_ids, p_fail_msgs) AS f(task_id, msg) ON f.task_id = x.task_id
          LEFT JOIN kind_config kc ON kc.kind = x.kind AND kc.kind_version = x.kind_version
          LEFT JOIN kind_manifest m ON m.kind = x.kind AND m.kind_version = x.kind_version
    ), retry AS (
        UPDATE work_queue w SET
            state = 'pending',
            attempts = w.attempts + 1,
            not_before = now() + make_interval(secs => LEAST(p_retry_max_ms, p_retry_base_ms * power(2, LEAST(w.attempts, 20)))
                                                       * (0.5 + random() / 2) / 1000.0),
            last_error = s.err,
            claimed_by = NULL,
            lease_until = NULL
          FROM src s
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.shard_id = s.shard_id AND w.resource_id = s.resource_id AND w.task_type = s.task_type
           AND w.claim_epoch = s.claim_epoch AND w.state = 'claimed'
           AND s.err IS NOT NULL AND NOT s.term0 AND w.generation = w.claimed_gen
           AND NOT (s.max_attempts > 0 AND w.attempts + 1 >= s.max_attempts)
        RETURNING ROW(w.resource_id, s.task_id, s.claim_epoch, s.claimed_at, s.trigger, s.generation, s.emits, s.outcome,
            s.err, false, false, w.rollup_dirty, s.has_rollup, s.abandoned, w.enqueued_at)::drain_item AS item
    ), fin AS (
        DELETE FROM work_queue w
         USING src s
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.shard_id = s.shard_id AND w.resource_id = s.resource_id AND w.task_type = s.task_type
           AND w.claim_epoch = s.claim_epoch AND w.state = 'claimed'
           AND NOT (s.err IS NOT NULL AND NOT s.term0 AND w.generation = w.claimed_gen
                    AND NOT (s.max_attempts > 0 AND w.attempts + 1 >= s.max_attempts))
        RETURNING ROW(w.resource_id, s.task_id, s.claim_epoch, s.claimed_at, s.trigger, s.generation, s.emits, s.outcome,
            CASE WHEN s.err IS NULL THEN NULL
                 WHEN NOT s.term0 AND w.generation = w.claimed_gen
                      THEN format('gave up after %s transient attempts: %s', w.attempts + 1, s.err)
                 ELSE s.err END,
            s.term0 OR (s.err IS NOT NULL AND w.generation = w.claimed_gen),
            w.generation > w.claimed_gen,
            w.rollup_dirty,
            s.has_rollup,
            s.abandoned,
            w.enqueued_at)::drain_item AS item
    )
    SELECT array_agg(item) INTO v_items FROM (SELECT * FROM retry UNION ALL SELECT * FROM fin) x;
    RETURN v_items;
END
$$;

-- apply_items applies outcomes whose work rows are finished (finish_work,
-- or finish_successes' delete of a plain success): one coalesced resources
-- UPDATE (status, spec_gen/synced_gen, health_ok, failure_gen — only the
-- parts the reaction's emits mask allows — and last_task_*, by which
-- complete_tasks recognises a repeat: last_task_abandoned says the outcome
-- was a failure the dispatcher recorded in the provider's place),
-- conditions on transition with stale False rows cleared on recovery,
-- events, value flows, re-scheduling, and the removal of nodes whose
-- teardown succeeded. It returns how many it applied. complete_plain
-- (completion.sql) is its specialisation for the plain successes of
-- reconcile tasks and writes what it would for them: a change to one is a
-- change to the other.
--
-- It plans without sequential scans: its generic plans are made at the
-- session's first call and kept, and one made while resources was small
-- scanned every resource in the phase read and the UPDATE and compared each
-- with every id of the batch (= ANY on a parameter is a linear search), a
-- cost that grows with the table.
-- A bulk apply or a large composite grows the table faster than autovacuum
-- re-analyzes it (which would re-plan). TestCompletionReadsOnlyClaimedRows
-- counts the resources a completion reads.
CREATE OR REPLACE FUNCTION apply_items(p_items drain_item[], p_was_ids uuid[] DEFAULT NULL, p_was text[] DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_status_ids uuid[];
    v_was_ids uuid[];
    v_was text[];
    v_now_ids uuid[];
    v_now text[];
    v_rids uuid[];
    v_ids uuid[];
    v_rollup uuid[];
BEGIN
    IF p_items IS NULL OR cardinality(p_items) = 0 THEN RETURN 0; END IF;
    v_rids := array(SELECT i.resource_id FROM unnest(p_items) i);

    -- The phases before the update: a success is logged only if it moves
    -- the phase. (Kept by the update itself in a column, the wider row
    -- left fewer of the apply's updates HOT, and a non-HOT update writes
    -- every index of resources: that cost more than this read.) A caller
    -- that locked the resources first passes the phases its lock read
    -- (p_was_ids, p_was).
    IF p_was_ids IS NULL THEN
        SELECT array_agg(r.id), array_agg(r.phase) INTO v_was_ids, v_was
          FROM resources r WHERE r.id = ANY (v_rids);
    ELSE
        v_was_ids := p_was_ids;
        v_was := p_was;
    END IF;

    WITH up AS (
        UPDATE resources r SET
            status = CASE WHEN i.error IS NULL AND i.emits & 8 <> 0 AND jsonb_typeof(i.outcome->'status') NOT IN ('null')
                          THEN i.outcome->'status' ELSE r.status END,
            spec_gen = CASE WHEN i.error IS NULL AND i.trigger = 'specChange'
                            THEN GREATEST(r.spec_gen, LEAST(i.generation, r.generation)) ELSE r.spec_gen END,
            synced_gen = CASE WHEN i.error IS NULL AND (i.trigger IN ('childrenSettled','resync') OR (i.trigger = 'specChange' AND NOT i.has_rollup))
                              THEN GREATEST(r.synced_gen, LEAST(i.generation, r.generation)) ELSE r.synced_gen END,
            health_ok = CASE WHEN i.error IS NOT NULL OR i.trigger = 'operation' THEN r.health_ok
                             ELSE NOT (i.emits & 16 <> 0 AND coalesce(jsonb_path_exists(i.outcome, '$.conditions[*] ? (@.type == "Ready" && @.status == "False")'), false)) END,
            -- An operate task's failure fails its op (finish_operations), not
            -- the resource.
            failure_gen = CASE WHEN i.trigger = 'operation' THEN r.failure_gen WHEN i.error IS NULL THEN 0 ELSE i.generation END,
            failure_terminal = CASE WHEN i.trigger = 'operation' THEN r.failure_terminal WHEN i.error IS NULL THEN false ELSE i.terminal END,
            last_error = CASE WHEN i.trigger = 'operation' THEN r.last_error ELSE i.error END,
            last_task_id = i.task_id,
            last_task_epoch = i.claim_epoch,
            last_task_abandoned = i.abandoned,
            last_claimed_at = i.claimed_at,
            last_enqueued_at = i.enqueued_at,
            updated_at = now()
          -- One item per resource: an UPDATE ... FROM applies only one of a
          -- row's matches, and an arbitrary one. A reconcile (or delete) and an
          -- operate task of one resource may finish in one batch; the
          -- reconcile's outcome is the one the resource's phase needs (the
          -- op's own result is kept by finish_operations).
          FROM (SELECT DISTINCT ON (x.resource_id) x.* FROM unnest(p_items) x
                 ORDER BY x.resource_id, x.trigger = 'operation') i
         WHERE r.id = i.resource_id
           AND r.id = ANY (v_rids) -- an index lookup, not a scan of every resource per batch
        RETURNING r.id, r.phase)
    SELECT array_agg(id), array_agg(phase) INTO v_now_ids, v_now FROM up;

    -- The statuses that feed value flows: a success that reports a status,
    -- on a resource something depends on (substitute_values writes a
    -- dependent only if its spec changes, so an unchanged status costs it
    -- a read, not a write). Read after the UPDATE, which may have waited
    -- for a compose adding an edge from one of these resources
    -- (apply_compose locks a new edge's upstream): this statement's
    -- snapshot then shows the edge. The batch's upstreams are found in one
    -- scan of idx_resource_deps_dependency (MATERIALIZED: a probe per item,
    -- with = ANY as a second condition, would walk the array on every
    -- probe).
    WITH upstream AS MATERIALIZED (
        SELECT DISTINCT d.dependency_id FROM resource_deps d WHERE d.dependency_id = ANY (v_rids)
    )
    SELECT array_agg(DISTINCT i.resource_id) INTO v_status_ids
      FROM unnest(p_items) i
      JOIN upstream u ON u.dependency_id = i.resource_id
     WHERE i.error IS NULL AND i.emits & 8 <> 0 AND jsonb_typeof(i.outcome->'status') NOT IN ('null');

    -- Conditions: written on transition; a stored False not re-reported is
    -- cleared the moment the resource reconciles cleanly.
    INSERT INTO resource_conditions AS c (resource_id, type, status, reason, message)
    SELECT i.resource_id, x->>'type', x->>'status', coalesce(x->>'reason', ''), coalesce(x->>'message', '')
      FROM unnest(p_items) i CROSS JOIN LATERAL jsonb_array_elements(i.outcome->'conditions') x
     WHERE i.error IS NULL AND i.emits & 16 <> 0 AND jsonb_typeof(i.outcome->'conditions') = 'array'
    UNION ALL
    SELECT i.resource_id, CASE WHEN i.trigger = 'deleteRequested' THEN 'Teardown' ELSE 'Synced' END, 'False',
           CASE WHEN i.terminal THEN 'TerminalError' WHEN i.trigger = 'deleteRequested' THEN 'TeardownError' ELSE 'ReconcileError' END,
           left(i.error, 4096)
      FROM unnest(p_items) i WHERE i.error IS NOT NULL AND i.trigger <> 'operation'
    ON CONFLICT (resource_id, type) DO UPDATE SET
        status = EXCLUDED.status, reason = EXCLUDED.reason, message = EXCLUDED.message,
        last_transition_time = CASE WHEN c.status <> EXCLUDED.status THEN now() ELSE c.last_transition_time END
    WHERE (c.status, c.reason, c.message) IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message);

    -- (Probed first on idx_conditions_false, which holds only False rows:
    -- on a healthy fleet the batch has none to clear.)
    IF EXISTS (SELECT 1 FROM resource_conditions c WHERE c.status = 'False' AND c.resource_id = ANY (v_rids)) THEN
        DELETE FROM resource_conditions c
         USING unnest(p_items) i
         WHERE c.resource_id = i.resource_id AND i.error IS NULL AND c.status = 'False' AND i.trigger <> 'operation'
           AND NOT (i.emits & 16 <> 0 AND jsonb_typeof(i.outcome->'conditions') = 'array'
                    AND EXISTS (SELECT 1 FROM jsonb_array_elements(i.outcome->'conditions') x WHERE x->>'type' = c.type));
    END IF;

    -- The event log keeps what a person reads (issue #13): every failure,
    -- and a success only when it moved the phase (Reconciling -> Ready,
    -- Failed -> Ready, a health flip). A task's times are on the resource
    -- (last_enqueued_at, last_claimed_at, updated_at), not in events.
    INSERT INTO resource_events (resource_id, type, generation, message)
    SELECT i.resource_id, CASE WHEN i.error IS NULL THEN 'succeeded' ELSE 'failed' END, i.generation,
           CASE WHEN i.error IS NULL THEN i.trigger
                ELSE format('%s (%s): %s', i.trigger, CASE WHEN i.terminal THEN 'terminal' ELSE 'transient' END, left(i.error, 1024)) END
      FROM unnest(p_items) i
      LEFT JOIN unnest(v_was_ids, v_was) AS w(id, phase) ON w.id = i.resource_id
      LEFT JOIN unnest(v_now_ids, v_now) AS n(id, phase) ON n.id = i.resource_id
     WHERE i.error IS NOT NULL OR w.phase IS DISTINCT FROM n.phase;

    PERFORM substitute_values(v_status_ids);
    PERFORM finish_operations(p_items);

    -- A leaf's success needs no re-scheduling (its dependents are scheduled
    -- by the cascade); a rerun, a composer's next step or a failure might.
    SELECT array_agg(i.resource_id) FILTER (WHERE i.rerun OR (i.error IS NULL AND i.trigger = 'specChange' AND i.has_rollup)),
           array_agg(i.resource_id) FILTER (WHERE i.rollup_dirty)
      INTO v_ids, v_rollup
      FROM unnest(p_items) i;
    PERFORM schedule_eligible(v_ids);
    PERFORM schedule_rollup(v_rollup);
    -- A teardown that succeeded removes its node (teardown.sql).
    PERFORM teardown_finish(array(SELECT i.resource_id FROM unnest(p_items) i
                                   WHERE i.trigger = 'deleteRequested' AND i.error IS NULL));
    RETURN cardinality(p_items);
END
$$;
