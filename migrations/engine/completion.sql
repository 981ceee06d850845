-- Completion: an outcome is applied where it arrives, fenced by its claim.
-- complete_tasks finishes each task's work row while it is claimed at the
-- completion's epoch (a plain success deletes it outright; a failure is
-- locked, then deleted or re-pended by finish_work, drain.sql) and applies
-- the outcome to its resource in the same transaction (apply_items): a
-- repeat then finds no claim. Only an outcome that composes (children,
-- edges, configs) is queued in work_outbox for the drain, which applies
-- compositions one root at a time off the completion's path; keyed by the
-- claim (shard_id, task_id, claim_epoch), a repeat of it conflicts.

-- outcome_composes says whether an outcome goes through the outbox: a
-- success that reports children, edges or configs, of a reaction allowed to
-- (emits & 7). Written once for the routing (complete_tasks) and the drain's
-- composition loop (apply_outcomes); a SQL expression, inlined where used.
CREATE OR REPLACE FUNCTION outcome_composes(p_emits int, p_error text, p_outcome jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_emits & 7 <> 0 AND p_error IS NULL AND p_outcome IS NOT NULL
       AND (p_outcome ? 'children' OR p_outcome ? 'edges' OR p_outcome ? 'configs')
$$;

-- finish_successes finishes the work rows of the plain successes (no
-- error, nothing to compose) complete_plain leaves: an operate or delete
-- task's, one that reports conditions, any in a batch that holds two tasks
-- of one resource. Each row is deleted while it is
-- claimed at the completion's epoch and no outcome is queued for the claim,
-- one write where a lock and then a delete took two. It returns them as
-- drain_items for apply_items, with the kinds and namespaces inflight_release
-- needs.
--
-- The plan is cached from the session's first call, when the queue's
-- statistics may say anything (an empty queue, or claimed rows rare beside
-- a backlog): planned from such numbers, the delete nested-looped over every
-- claimed row per input (quadratic in the batch), or hash-joined a scan of
-- every row of the queue, pending ones too. Without nested loops and
-- sequential scans it joins the batch with the claimed rows only (the
-- partial index on state = 'claimed'), linear in what is in flight, as the
-- locking statement it replaced did. The delete locks in that plan's order,
-- not key order: a repeat racing its original over two shared tasks can
-- deadlock, and the store runs a completion again on a deadlock. A repeat
-- while the drain applies a queued outcome sees its outbox row still (the
-- delete is not committed) and does not wait on it.
CREATE OR REPLACE FUNCTION finish_successes(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[],
                               p_outcomes jsonb[], p_errors text[], p_terminals boolean[], p_abandoned boolean[],
                               OUT items drain_item[], OUT ids uuid[], OUT kinds text[], OUT vers smallint[], OUT los smallint[],
                               OUT nss text[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_nestloop = off SET enable_seqscan = off SET jit = off AS $$
BEGIN
    WITH d AS (
        DELETE FROM work_queue w
         USING unnest(p_task_ids, p_shards, p_epochs, p_outcomes, p_errors, p_terminals, p_abandoned) WITH ORDINALITY
                 AS i(task_id, shard_id, epoch, outcome, error, terminal, abandoned, ord)
         WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id AND w.claim_epoch = i.epoch AND w.state = 'claimed'
           AND i.error IS NULL AND NOT outcome_composes(w.emits, i.error, i.outcome)
           AND NOT EXISTS (SELECT 1 FROM work_outbox o
                            WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
        RETURNING i.ord, w.resource_id, w.task_id, w.claim_epoch, w.claimed_at, w.trigger, w.claimed_gen, w.emits, i.outcome,
                  coalesce(i.terminal, false) AS terminal, w.generation > w.claimed_gen AS rerun, w.rollup_dirty,
                  coalesce(i.abandoned, false) AS abandoned, w.enqueued_at, w.kind, w.kind_version, w.claim_lo, w.namespace
    )
    SELECT array_agg(ROW(d.resource_id, d.task_id, d.claim_epoch, d.claimed_at, d.trigger, d.claimed_gen, d.emits, d.outcome,
                         NULL, d.terminal, d.rerun, d.rollup_dirty, m.rollup_reaction IS NOT NULL, d.abandoned,
                         d.enqueued_at)::drain_item ORDER BY d.ord),
           array_agg(d.task_id), array_agg(d.kind), array_agg(d.kind_version), array_agg(d.claim_lo), array_agg(d.namespace)
      INTO items, ids, kinds, vers, los, nss
      FROM d LEFT JOIN kind_manifest m ON m.kind = d.kind AND m.kind_version = d.kind_version;
END
$$;

-- complete_plain applies, in one statement, the plain successes of
-- reconcile tasks (no error, nothing to compose, no conditions reported),
-- the outcome of almost every task: it deletes each work row while it is
-- claimed at the completion's epoch and none of its outcome is queued,
-- updates its resource as apply_items would for that outcome, and logs the
-- `succeeded` event of a phase change. It returns what inflight_release
-- needs of each task it applied. It is apply_items specialised: a success
-- writes no condition (it only clears stale False ones), flows no value
-- unless it reports a status to a dependent, and re-schedules only a rerun,
-- a composer's next step or a dirty rollup; an operate or delete task
-- (task_type), a failure, an outcome that composes or reports conditions
-- takes the general path (finish_successes, finish_work, apply_items).
--
-- The caller locked the batch's resources first (lock_resources: their ids
-- and phases are p_was_ids and p_was) and calls it only when each input has
-- a resource of its own: two tasks of one resource in a batch are merged by
-- apply_items (one outcome per resource), which this update does not do. A
-- task whose work row is not on the resource the caller named (so not on
-- one locked) is left to the general path too.
--
-- Its settings are finish_successes', for the same reasons, and no merge
-- joins: planned on the batch's estimate of one row, the delete merged the
-- batch with the claimed rows on shard_id alone (the order of the index
-- on claimed rows) and compared each input with every claimed row of its
-- shard; hashed on the whole key, each input is one probe. The update
-- finds the resources by p_was_ids, an index lookup, as apply_items does.
CREATE OR REPLACE FUNCTION complete_plain(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_resource_ids uuid[],
                                          p_outcomes jsonb[], p_errors text[], p_abandoned boolean[], p_was_ids uuid[], p_was text[],
                                          OUT ids uuid[], OUT kinds text[], OUT vers smallint[], OUT los smallint[], OUT nss text[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_nestloop = off SET enable_mergejoin = off
                 SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_rids uuid[];
    v_status uuid[];
    v_sched uuid[];
    v_rollup uuid[];
BEGIN
    WITH d AS (
        DELETE FROM work_queue w
         USING unnest(p_task_ids, p_shards, p_epochs, p_resource_ids, p_outcomes, p_errors, p_abandoned)
                 AS i(task_id, shard_id, epoch, resource_id, outcome, error, abandoned)
         WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id AND w.claim_epoch = i.epoch AND w.state = 'claimed'
           AND w.resource_id = coalesce(i.resource_id, w.resource_id)
           AND w.task_type = 'reconcile' AND i.error IS NULL AND NOT outcome_composes(w.emits, i.error, i.outcome)
           AND NOT (w.emits & 16 <> 0 AND coalesce(jsonb_typeof(i.outcome->'conditions') = 'array', false))
           AND NOT EXISTS (SELECT 1 FROM work_outbox o
                            WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
        RETURNING w.resource_id, w.task_id, w.claim_epoch, w.claimed_at, w.trigger, w.claimed_gen, w.emits, i.outcome,
                  coalesce(i.abandoned, false) AS abandoned, w.generation > w.claimed_gen AS rerun, w.rollup_dirty,
                  w.enqueued_at, w.kind, w.kind_version, w.claim_lo, w.namespace
    ), x AS (
        SELECT d.*, m.rollup_reaction IS NOT NULL AS has_rollup,
               d.emits & 8 <> 0 AND jsonb_typeof(d.outcome->'status') NOT IN ('null') AS reports_status
          FROM d LEFT JOIN kind_manifest m ON m.kind = d.kind AND m.kind_version = d.kind_version
    ), up AS (
        -- apply_items' update for a success of a trigger other than
        -- 'operation'.
        UPDATE resources r SET
            status = CASE WHEN x.reports_status THEN x.outcome->'status' ELSE r.status END,
            spec_gen = CASE WHEN x.trigger = 'specChange' THEN GREATEST(r.spec_gen, LEAST(x.claimed_gen, r.generation)) ELSE r.spec_gen END,
            synced_gen = CASE WHEN x.trigger IN ('childrenSettled','resync') OR (x.trigger = 'specChange' AND NOT x.has_rollup)
                              THEN GREATEST(r.synced_gen, LEAST(x.claimed_gen, r.generation)) ELSE r.synced_gen END,
            health_ok = NOT (x.emits & 16 <> 0 AND coalesce(jsonb_path_exists(x.outcome, '$.conditions[*] ? (@.type == "Ready" && @.status == "False")'), false)),
            failure_gen = 0,
            failure_terminal = false,
            last_error = NULL,
            last_task_id = x.task_id,
            last_task_epoch = x.claim_epoch,
            last_task_abandoned = x.abandoned,
            last_claimed_at = x.claimed_at,
            last_enqueued_at = x.enqueued_at,
            updated_at = now()
          FROM x
         WHERE r.id = x.resource_id
           AND r.id = ANY (p_was_ids)
        RETURNING r.id, r.phase
    ), ev AS (
        INSERT INTO resource_events (resource_id, type, generation, message)
        SELECT x.resource_id, 'succeeded', x.claimed_gen, x.trigger
          FROM x JOIN up ON up.id = x.resource_id
          LEFT JOIN unnest(p_was_ids, p_was) AS was(id, phase) ON was.id = x.resource_id
         WHERE was.phase IS DISTINCT FROM up.phase
    )
    SELECT array_agg(x.task_id), array_agg(x.kind), array_agg(x.kind_version), array_agg(x.claim_lo), array_agg(x.namespace),
           array_agg(x.resource_id),
           array_agg(x.resource_id) FILTER (WHERE x.reports_status),
           array_agg(x.resource_id) FILTER (WHERE x.rerun OR (x.trigger = 'specChange' AND x.has_rollup)),
           array_agg(x.resource_id) FILTER (WHERE x.rollup_dirty)
      INTO ids, kinds, vers, los, nss, v_rids, v_status, v_sched, v_rollup
      FROM x;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM resource_conditions c WHERE c.status = 'False' AND c.resource_id = ANY (v_rids)) THEN
        DELETE FROM resource_conditions c WHERE c.status = 'False' AND c.resource_id = ANY (v_rids);
    END IF;
    -- The upstreams are read by a statement after the update's, as
    -- apply_items reads them: an edge a compose added from one of these
    -- resources before the lock was granted is seen.
    IF v_status IS NOT NULL THEN
        PERFORM substitute_values(array(SELECT DISTINCT d.dependency_id FROM resource_deps d WHERE d.dependency_id = ANY (v_status)));
    END IF;
    PERFORM schedule_eligible(v_sched);
    PERFORM schedule_rollup(v_rollup);
    -- For the change stream (control/api/events.go): resources moved.
    PERFORM notify_gated('outcomes_applied');
END
$$;

-- lock_resources locks, in key order, the resources of the tasks a
-- completion finishes, as a writer that then writes their work rows must
-- (complete_tasks), and returns their phases, which apply_items would
-- otherwise read again. A task's resource is the caller's p_resource_ids,
-- or, where that is NULL (a callback token need not carry it), its work
-- row's. It plans without sequential scans: its generic plan is kept from
-- the session's first call, and one made on a small table scanned every
-- resource (TestCompletionReadsOnlyClaimedRows).
CREATE OR REPLACE FUNCTION lock_resources(p_task_ids uuid[], p_shards smallint[], p_resource_ids uuid[],
                                          OUT ids uuid[], OUT phases text[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET jit = off AS $$
BEGIN
    SELECT array_agg(l.id), array_agg(l.phase) INTO ids, phases
      FROM (SELECT r.id, r.phase FROM resources r
             WHERE r.id = ANY (ARRAY(
                   SELECT coalesce(i.resource_id, (SELECT w.resource_id FROM work_queue w
                                                   WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id))
                     FROM unnest(p_task_ids, p_shards, p_resource_ids) AS i(task_id, shard_id, resource_id)))
             ORDER BY r.id FOR NO KEY UPDATE) l;
END
$$;

-- complete_tasks records outcomes for claimed tasks. An outcome is accepted only
-- if its row is still claimed at that claim_epoch and none is queued for the
-- claim yet (applied, and not listed in the result); a repeat of an accepted
-- completion is 'duplicate' (a no-op success), recognised from the outbox or,
-- once applied, from the resource's last_task_id/last_task_epoch; anything
-- else is 'superseded' (the claim was reclaimed or re-pended, or its resource
-- is gone). p_retry_base_ms and p_retry_max_ms shape a transient failure's
-- backoff (finish_work).
--
-- p_abandoned marks a failure the dispatcher records in the provider's place
-- because it gave up on the provider's answer (a request timeout, a broken
-- connection, an accepted task whose callback never came, ...). The
-- provider's own Result for that claim may still arrive by callback; it was
-- not applied, so it is 'superseded', never 'duplicate': 'duplicate' tells a
-- provider that its Result took effect. Only an accepted outcome that was
-- not abandoned makes a repeat a duplicate. (A NULL mark is false.)
--
-- A reactor delivery (lifecycle_outbox) is completed by acking or backing
-- it off, which ends its claim: a repeat is 'superseded'.
--
-- Its locks, in order (the lock order, docs/operations.md): the batch's
-- resources, in key order; their work rows; what applying the outcomes
-- writes (apply_items: dependents, parents, their work rows, ...); the
-- reactor deliveries; last, the capped kinds' kind_inflight rows, in key
-- order, then the capped namespaces' namespace_inflight rows
-- (inflight_release).
CREATE OR REPLACE FUNCTION complete_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_resource_ids uuid[],
                               p_outcomes jsonb[], p_errors text[], p_terminals boolean[], p_abandoned boolean[],
                               p_retry_base_ms int, p_retry_max_ms int)
RETURNS TABLE (task_id uuid, result text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    v_done drain_item[];
    v_queued uuid[];
    v_direct work_outbox[];
    v_applied uuid[];
    v_ids uuid[];
    v_kinds text[];
    v_vers smallint[];
    v_los smallint[];
    v_nss text[];
    v_lo int;
    v_hi int;
    b_ids uuid[];
    b_kinds text[];
    b_vers smallint[];
    b_los smallint[];
    b_nss text[];
    b_applied uuid[];
    v_was_ids uuid[];
    v_was text[];
BEGIN
    -- The batch's resources are locked first, in key order. Every other
    -- writer of a resource and its work row (an apply, an operator action,
    -- a compose, a value flow) takes the resource row before the work row;
    -- a completion that deleted its work rows first and then waited for a
    -- resource an apply held, while the apply's enqueue waited for that
    -- uncommitted delete, deadlocked, and the completion was the victim
    -- each time (it waits first): after three in a row its claim waited
    -- for its lease to lapse. TestCompletionRacingAnApplyDoesNotDeadlock.
    -- The lock reads the phases the apply compares with (nothing else
    -- writes these rows before it, now).
    SELECT l.ids, l.phases INTO v_was_ids, v_was FROM lock_resources(p_task_ids, p_shards, p_resource_ids) l;
    -- The plain successes first, in one statement (complete_plain), when
    -- every input has a resource of its own (as many resources were locked
    -- as there are inputs; none of none, so warm_session plans it); then
    -- the other plain successes (finish_successes, apply_items below).
    IF coalesce(cardinality(v_was_ids), 0) = cardinality(p_task_ids) THEN
        SELECT p.ids, p.kinds, p.vers, p.los, p.nss INTO v_ids, v_kinds, v_vers, v_los, v_nss
          FROM complete_plain(p_task_ids, p_shards, p_epochs, p_resource_ids, p_outcomes, p_errors, p_abandoned, v_was_ids, v_was) p;
    END IF;
    v_applied := coalesce(v_ids, '{}');
    IF cardinality(v_applied) < cardinality(p_task_ids) THEN
        SELECT f.items, f.ids, f.kinds, f.vers, f.los, f.nss INTO v_done, b_ids, b_kinds, b_vers, b_los, b_nss
          FROM finish_successes(p_task_ids, p_shards, p_epochs, p_outcomes, p_errors, p_terminals, p_abandoned) f;
        v_applied := v_applied || coalesce(b_ids, '{}');
        v_kinds := v_kinds || b_kinds;
        v_vers := v_vers || b_vers;
        v_los := v_los || b_los;
        v_nss := v_nss || b_nss;
    END IF;

    -- The rest (failures, outcomes that compose, and inputs that match no
    -- claim) are locked in key order, so two completers that share tasks
    -- wait on each other rather than deadlock; a repeat that waited finds
    -- the row finished or re-pended (EvalPlanQual) and drops out. The rows
    -- deleted above are gone from this statement's view.
    IF cardinality(v_applied) < cardinality(p_task_ids) THEN
        WITH src AS MATERIALIZED (
            SELECT w.shard_id, w.resource_id, w.task_id, w.task_type, w.kind, w.kind_version, w.trigger, w.claim_epoch, w.claimed_at,
                   w.claimed_gen, w.emits, w.claim_lo, w.namespace, i.outcome, i.error, coalesce(i.terminal, false) AS terminal,
                   coalesce(i.abandoned, false) AS abandoned, i.ord, outcome_composes(w.emits, i.error, i.outcome) AS composes
              FROM unnest(p_task_ids, p_shards, p_epochs, p_outcomes, p_errors, p_terminals, p_abandoned) WITH ORDINALITY
                     AS i(task_id, shard_id, epoch, outcome, error, terminal, abandoned, ord)
              JOIN work_queue w ON w.shard_id = i.shard_id AND w.task_id = i.task_id
             WHERE w.claim_epoch = i.epoch AND w.state = 'claimed'
               AND NOT EXISTS (SELECT 1 FROM work_outbox o
                                WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
             ORDER BY w.shard_id, w.task_id
               FOR UPDATE OF w
        ), ins AS (
            INSERT INTO work_outbox (shard_id, resource_id, task_id, task_type, kind, kind_version, trigger, claim_epoch, claimed_at, generation, emits, outcome, error, terminal, abandoned)
            SELECT shard_id, resource_id, task_id, task_type, kind, kind_version, trigger, claim_epoch, claimed_at, claimed_gen, emits,
                   outcome, error, terminal, abandoned
              FROM src WHERE composes
            ON CONFLICT (shard_id, task_id, claim_epoch) DO NOTHING
            RETURNING work_outbox.task_id
        )
        -- The kinds to release are read from src whole, not joined to ins:
        -- both CTEs are estimated at one row, so the join planned as a
        -- nested loop, quadratic in the batch: most of a large completion's
        -- time. Only a repeat racing this call between the probe and the
        -- insert makes ins smaller than the composing part of src; that rare
        -- case is filtered below.
        SELECT (SELECT array_agg(ins.task_id) FROM ins),
               array_agg(ROW(s.ord, s.shard_id, s.resource_id, s.task_id, s.task_type, s.kind, s.kind_version, s.trigger, s.claim_epoch,
                             s.claimed_gen, s.emits, s.outcome, s.error, s.terminal, now(), s.claimed_at, s.abandoned)::work_outbox
                         ORDER BY s.ord) FILTER (WHERE NOT s.composes),
               array_agg(s.task_id), array_agg(s.kind), array_agg(s.kind_version), array_agg(s.claim_lo), array_agg(s.namespace),
               min(s.shard_id) FILTER (WHERE NOT s.composes), max(s.shard_id) FILTER (WHERE NOT s.composes)
          INTO v_queued, v_direct, b_ids, b_kinds, b_vers, b_los, b_nss, v_lo, v_hi
          FROM src s;
        IF b_ids IS NOT NULL THEN
            b_applied := array(SELECT d.task_id FROM unnest(v_direct) d) || coalesce(v_queued, '{}');
            IF cardinality(b_applied) < cardinality(b_ids) THEN
                SELECT array_agg(s.kind), array_agg(s.kind_version), array_agg(s.claim_lo), array_agg(s.namespace)
                  INTO b_kinds, b_vers, b_los, b_nss
                  FROM unnest(b_ids, b_kinds, b_vers, b_los, b_nss) AS s(task_id, kind, kind_version, claim_lo, namespace)
                 WHERE s.task_id = ANY (b_applied);
            END IF;
            v_applied := v_applied || b_applied;
            v_kinds := v_kinds || b_kinds;
            v_vers := v_vers || b_vers;
            v_los := v_los || b_los;
            v_nss := v_nss || b_nss;
        END IF;
    END IF;
    IF v_queued IS NOT NULL THEN
        PERFORM notify_gated('outbox_ready');
    END IF;
    IF v_direct IS NOT NULL THEN
        v_done := v_done || finish_work(v_direct, '{}', '{}', v_lo, v_hi, p_retry_base_ms, p_retry_max_ms);
    END IF;
    IF v_done IS NOT NULL THEN
        PERFORM apply_items(v_done, v_was_ids, v_was);
        -- For the change stream (control/api/events.go): resources moved.
        PERFORM notify_gated('outcomes_applied');
    END IF;
    -- Only inputs that matched no claimed work row can be reactor
    -- deliveries, so a batch of work pays nothing here. A success acks the
    -- delivery (deletes its row; only now, so delivery is at least once); a
    -- failure, transient or terminal alike (a reactor's sink may recover),
    -- gives it back with jittered exponential backoff, capped at 5 minutes.
    IF cardinality(v_applied) < cardinality(p_task_ids) THEN
        WITH i AS (
            SELECT * FROM unnest(p_task_ids, p_shards, p_epochs, p_errors) AS i(task_id, shard_id, epoch, error)
             WHERE NOT i.task_id = ANY (coalesce(v_applied, '{}'))
        ), acked AS (
            DELETE FROM lifecycle_outbox l USING i
             WHERE l.shard_id = i.shard_id AND l.task_id = i.task_id AND l.claim_epoch = i.epoch
               AND l.claimed_by IS NOT NULL AND i.error IS NULL
            RETURNING l.task_id
        ), retried AS (
            UPDATE lifecycle_outbox l SET claimed_by = NULL, lease_until = NULL, attempts = l.attempts + 1, last_error = i.error,
                   not_before = now() + make_interval(secs => least(300, 2 ^ least(l.attempts, 9)) * (0.5 + random() / 2))
              FROM i
             WHERE l.shard_id = i.shard_id AND l.task_id = i.task_id AND l.claim_epoch = i.epoch
               AND l.claimed_by IS NOT NULL AND i.error IS NOT NULL
            RETURNING l.task_id
        )
        SELECT v_applied || array_agg(x.task_id) INTO v_applied
          FROM (SELECT task_id FROM acked UNION ALL SELECT task_id FROM retried) x;
    END IF;
    -- A task with an applied or queued outcome is no longer at its
    -- provider: its capped kind gets the token back now, not when the
    -- drain applies a queued outcome (which held it for the outbox's wait
    -- too, and made every claim of that kind queue behind the drain's row
    -- lock). The token rows are the last rows a completion locks (the lock
    -- order, docs/operations.md): given back before the outcomes were
    -- applied, a token's row was held while apply_items waited for a work
    -- row a claim had picked, and that claim waited for the token's row to
    -- spend it, a deadlock (TestCappedClaimRacingACompletionDoesNotDeadlock).
    IF v_kinds IS NOT NULL THEN
        PERFORM inflight_release(v_kinds, v_vers, v_los, v_nss);
        -- A claimer turned away at a cap has nothing else to wake it: the
        -- slot its delivery freed woke it before this token was back.
        IF EXISTS (SELECT 1 FROM kind_config kc JOIN unnest(v_kinds, v_vers) AS k(kind, kind_version)
                     ON kc.kind = k.kind AND kc.kind_version = k.kind_version WHERE kc.max_inflight > 0)
           OR EXISTS (SELECT 1 FROM namespace_inflight i WHERE i.namespace = ANY (v_nss)) THEN
            PERFORM notify_gated('work_ready');
        END IF;
    END IF;
    -- Only the tasks not applied are answered; the caller takes silence for
    -- 'applied', so the common case costs no second probe per task, nor,
    -- when every input was applied (a task is applied once), this query. An
    -- abandoned outcome found by either probe makes the answer 'superseded'.
    IF cardinality(v_applied) = cardinality(p_task_ids) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT i.task_id,
           CASE WHEN EXISTS (SELECT 1 FROM work_outbox o
                              WHERE o.shard_id = i.shard_id AND o.task_id = i.task_id AND o.claim_epoch = i.epoch
                                AND NOT o.abandoned)
                  OR EXISTS (SELECT 1 FROM resources r
                              WHERE r.id = i.resource_id AND r.last_task_id = i.task_id AND r.last_task_epoch = i.epoch
                                AND NOT r.last_task_abandoned)
                THEN 'duplicate' ELSE 'superseded' END
      FROM unnest(p_task_ids, p_shards, p_epochs, p_resource_ids) AS i(task_id, shard_id, epoch, resource_id)
      LEFT JOIN unnest(v_applied) AS a(task_id) ON a.task_id = i.task_id
     WHERE a.task_id IS NULL;
END
$$;

-- expire_async_tasks ends asynchronous deliveries (the provider answered 202)
-- whose lease lapsed without a callback: each task still claimed at its epoch
-- with lease_until <= now() is completed with a transient error, abandoned
-- (an attempt is burnt and the task backs off as p_retry_base_ms and
-- p_retry_max_ms say; a late callback is superseded), under a row lock so a heartbeat that
-- races it either lands first (the lease moved: 'held') or finds the task
-- completed. It returns one row per input: 'expired' (completed now), 'held'
-- (still claimed; lease_until says until when) or 'gone' (completed by a
-- callback, superseded, or removed). A reactor delivery is expired the same
-- way: complete_tasks backs it off for a retry.
CREATE OR REPLACE FUNCTION expire_async_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_message text,
                                              p_retry_base_ms int, p_retry_max_ms int)
RETURNS TABLE (task_id uuid, state text, lease_until timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
    v_shards smallint[];
    v_epochs bigint[];
    v_rids uuid[];
    v_lost uuid[];
    n int;
BEGIN
    WITH w AS (
        SELECT w.task_id, w.shard_id, w.claim_epoch, w.resource_id
          FROM work_queue w
          JOIN unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
            ON w.shard_id = i.shard_id AND w.task_id = i.task_id
         WHERE w.claim_epoch = i.epoch AND w.state = 'claimed' AND w.lease_until <= now()
           AND NOT EXISTS (SELECT 1 FROM work_outbox o
                            WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
           FOR UPDATE OF w
    ), l AS (
        -- Reactor deliveries: completed (backed off) the same way.
        SELECT l.task_id, l.shard_id, l.claim_epoch, l.resource_id
          FROM lifecycle_outbox l
          JOIN unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
            ON l.shard_id = i.shard_id AND l.task_id = i.task_id
         WHERE l.claim_epoch = i.epoch AND l.claimed_by IS NOT NULL AND l.lease_until <= now()
           FOR UPDATE OF l
    )
    SELECT array_agg(c.task_id), array_agg(c.shard_id), array_agg(c.claim_epoch), array_agg(c.resource_id)
      INTO v_ids, v_shards, v_epochs, v_rids
      FROM (SELECT * FROM w UNION ALL SELECT * FROM l) c;
    IF v_ids IS NOT NULL THEN
        n := cardinality(v_ids);
        -- A callback that lands between the probe and this insert wins:
        -- the expiry is then not applied and the task reads as gone.
        SELECT array_agg(x.task_id) INTO v_lost
          FROM complete_tasks(v_ids, v_shards, v_epochs, v_rids,
                 array_fill(NULL::jsonb, ARRAY[n]), array_fill(p_message, ARRAY[n]), array_fill(false, ARRAY[n]),
                 array_fill(true, ARRAY[n]), p_retry_base_ms, p_retry_max_ms) x;
    END IF;
    RETURN QUERY
    SELECT i.task_id,
           CASE WHEN i.task_id = ANY (coalesce(v_ids, '{}')) AND NOT i.task_id = ANY (coalesce(v_lost, '{}')) THEN 'expired'
                WHEN w.state = 'claimed' AND w.claim_epoch = i.epoch AND NOT EXISTS (
                        SELECT 1 FROM work_outbox o WHERE o.shard_id = i.shard_id AND o.task_id = i.task_id AND o.claim_epoch = i.epoch)
                     THEN 'held'
                WHEN l.claimed_by IS NOT NULL AND l.claim_epoch = i.epoch THEN 'held'
                ELSE 'gone' END,
           CASE WHEN w.state = 'claimed' AND w.claim_epoch = i.epoch THEN w.lease_until
                WHEN l.claimed_by IS NOT NULL AND l.claim_epoch = i.epoch THEN l.lease_until END
      FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
      LEFT JOIN work_queue w ON w.shard_id = i.shard_id AND w.task_id = i.task_id
      LEFT JOIN lifecycle_outbox l ON w.task_id IS NULL AND l.shard_id = i.shard_id AND l.task_id = i.task_id;
END
$$;
