-- Claims: taking pending tasks (fenced by claim_epoch, held to each kind's
-- max_inflight), keeping them (leases), and giving them back.

-- claim_tasks claims up to p_limit pending tasks in [p_lo, p_hi] for the
-- (kind/version) pairs the caller can serve (NULL = any). It bumps claim_epoch
-- (the fence), stamps the lease and the deadline from kind_config, resolves the
-- reaction from the manifest, and holds each capped kind to max_inflight: the
-- budget is max_inflight minus the sum of kind_inflight partials, read under a
-- per-kind transaction lock so concurrent claimers cannot both spend it.
--
-- Budgets are read before any row is picked, and each capped kind takes at
-- most its budget, first; the uncapped kinds fill the rest of the batch. A
-- kind at its cap therefore costs the batch nothing: picking the first
-- pending rows regardless of kind and dropping those over the cap afterwards
-- let a capped kind with a deep backlog fill every batch and starve every
-- other kind (0 claimed while thousands waited).
-- Claims plan their statements once, as the scheduling functions do.
CREATE OR REPLACE FUNCTION claim_tasks(p_claimer text, p_lo int, p_hi int, p_pairs text[], p_limit int, p_lease_secs int)
RETURNS TABLE (task_id uuid, shard_id smallint, resource_id uuid, task_type text, trigger text,
               reaction text, emits int, kind text, kind_version smallint, generation bigint,
               claim_epoch bigint, attempts int, deadline timestamptz)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    v_shards smallint[];
    v_rids uuid[];
    v_types text[];
    v_kinds text[];
    v_vers smallint[];
    cap record;
    v_used int;
    v_capped text[] := '{}';
    v_budget_kinds text[] := '{}';
    v_budget_vers smallint[] := '{}';
    v_budgets int[] := '{}';
    v_taken int;
BEGIN
    FOR cap IN
        SELECT kc.kind, kc.kind_version, kc.max_inflight
          FROM kind_config kc
         WHERE kc.max_inflight > 0
           AND (p_pairs IS NULL OR (kc.kind || '/' || kc.kind_version) = ANY (p_pairs))
         ORDER BY 1, 2
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext('kind_cap:' || cap.kind || '/' || cap.kind_version));
        SELECT coalesce(sum(i.in_flight), 0) INTO v_used
          FROM kind_inflight i WHERE i.kind = cap.kind AND i.kind_version = cap.kind_version;
        v_capped := v_capped || (cap.kind || '/' || cap.kind_version);
        v_budget_kinds := v_budget_kinds || cap.kind;
        v_budget_vers := v_budget_vers || cap.kind_version;
        v_budgets := v_budgets || GREATEST(cap.max_inflight - v_used, 0);
    END LOOP;

    -- Capped kinds first, each up to its budget; then the uncapped kinds
    -- fill what is left of the batch.
    SELECT array_agg(x.shard_id), array_agg(x.resource_id), array_agg(x.task_type), array_agg(x.kind), array_agg(x.kind_version)
      INTO v_shards, v_rids, v_types, v_kinds, v_vers
      FROM unnest(v_budget_kinds, v_budget_vers, v_budgets) AS b(kind, kind_version, n)
     CROSS JOIN LATERAL (
           SELECT w.shard_id, w.resource_id, w.task_type, w.kind, w.kind_version
             FROM work_queue w
            WHERE w.shard_id BETWEEN p_lo AND p_hi
              AND w.state = 'pending'
              AND w.not_before <= now()
              AND w.kind = b.kind AND w.kind_version = b.kind_version
            LIMIT LEAST(b.n, p_limit)
              FOR UPDATE SKIP LOCKED) x
     WHERE b.n > 0;
    v_taken := coalesce(cardinality(v_rids), 0);
    IF v_taken < p_limit THEN
        SELECT v_shards || array_agg(c.shard_id), v_rids || array_agg(c.resource_id), v_types || array_agg(c.task_type),
               v_kinds || array_agg(c.kind), v_vers || array_agg(c.kind_version)
          INTO v_shards, v_rids, v_types, v_kinds, v_vers
          FROM (SELECT w.shard_id, w.resource_id, w.task_type, w.kind, w.kind_version
                  FROM work_queue w
                 WHERE w.shard_id BETWEEN p_lo AND p_hi
                   AND w.state = 'pending'
                   AND w.not_before <= now()
                   AND (p_pairs IS NULL OR (w.kind || '/' || w.kind_version) = ANY (p_pairs))
                   AND NOT ((w.kind || '/' || w.kind_version) = ANY (v_capped))
                 LIMIT p_limit - v_taken
                   FOR UPDATE SKIP LOCKED) c;
    END IF;
    IF v_rids IS NULL THEN RETURN; END IF;

    RETURN QUERY
    WITH sel AS (
        SELECT * FROM unnest(v_shards, v_rids, v_types, v_kinds, v_vers) AS c(shard_id, resource_id, task_type, kind, kind_version)
    ), budget AS (
        SELECT * FROM unnest(v_budget_kinds, v_budget_vers) AS b(kind, kind_version)
    ), claimed AS (
        UPDATE work_queue w SET
            state       = 'claimed',
            claim_epoch = w.claim_epoch + 1,
            claimed_by  = p_claimer,
            claim_lo    = p_lo,
            claimed_at  = now(),
            claimed_gen = w.generation,
            rollup_dirty = false,
            lease_until = now() + make_interval(secs => p_lease_secs),
            deadline    = CASE WHEN kc.task_deadline_secs > 0 THEN now() + make_interval(secs => kc.task_deadline_secs) END,
            reaction    = CASE w.trigger
                            WHEN 'specChange' THEN m.spec_reaction
                            WHEN 'childrenSettled' THEN m.rollup_reaction
                            WHEN 'resync' THEN coalesce(m.resync_reaction, m.spec_reaction)
                            WHEN 'deleteRequested' THEN m.delete_reaction
                            WHEN 'operation' THEN w.reaction -- set at enqueue, by verb
                          END,
            emits       = CASE w.trigger
                            WHEN 'specChange' THEN m.spec_emits
                            WHEN 'childrenSettled' THEN m.rollup_emits
                            WHEN 'operation' THEN w.emits
                            ELSE reaction_mask(jsonb_path_query_first(m.reactions, '$[*] ? (@.trigger == $t)', jsonb_build_object('t', w.trigger)))
                          END
          FROM sel
          JOIN kind_manifest m ON m.kind = sel.kind AND m.kind_version = sel.kind_version
          JOIN kind_config kc ON kc.kind = sel.kind AND kc.kind_version = sel.kind_version
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.shard_id = sel.shard_id AND w.resource_id = sel.resource_id AND w.task_type = sel.task_type
        RETURNING w.task_id, w.shard_id, w.resource_id, w.task_type, w.trigger, w.reaction, w.emits,
                  w.kind, w.kind_version, w.claimed_gen, w.claim_epoch, w.attempts, w.deadline
    ), bump AS (
        INSERT INTO kind_inflight AS i (kind, kind_version, range_lo, in_flight)
        SELECT b.kind, b.kind_version, p_lo, count(*)
          FROM claimed c JOIN budget b ON b.kind = c.kind AND b.kind_version = c.kind_version
         GROUP BY b.kind, b.kind_version
        ON CONFLICT (kind, kind_version, range_lo) DO UPDATE SET in_flight = i.in_flight + EXCLUDED.in_flight
    )
    SELECT * FROM claimed;
END
$$;

-- inflight_release gives capped kinds back their tokens for tasks leaving
-- the claimed state.
CREATE OR REPLACE FUNCTION inflight_release(p_kinds text[], p_vers smallint[], p_los smallint[]) RETURNS void
LANGUAGE sql AS $$
    UPDATE kind_inflight i SET in_flight = GREATEST(i.in_flight - x.n, 0)
      FROM (SELECT k.kind, k.kind_version, k.lo, count(*) AS n
              FROM unnest(p_kinds, p_vers, p_los) AS k(kind, kind_version, lo)
              JOIN kind_config kc ON kc.kind = k.kind AND kc.kind_version = k.kind_version
             WHERE kc.max_inflight > 0
             GROUP BY 1, 2, 3) x
     WHERE i.kind = x.kind AND i.kind_version = x.kind_version AND i.range_lo = x.lo
$$;

-- extend_leases renews the leases of tasks still claimed at their epoch and
-- returns the ones it renewed; a task missing from the result was superseded,
-- or its completion already waits in the outbox.
CREATE OR REPLACE FUNCTION extend_leases(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_lease_secs int)
RETURNS TABLE (task_id uuid)
LANGUAGE sql AS $$
    UPDATE work_queue w SET lease_until = now() + make_interval(secs => p_lease_secs)
      FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
     WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id AND w.claim_epoch = i.epoch AND w.state = 'claimed'
       AND NOT EXISTS (SELECT 1 FROM work_outbox o
                        WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
    RETURNING w.task_id
$$;

-- release_tasks gives claimed tasks back without burning an attempt (an
-- endpoint said 429, or nothing could take it): pending again after p_delay_ms.
CREATE OR REPLACE FUNCTION release_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_delay_ms int, p_reason text)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_kinds text[];
    v_vers smallint[];
    v_los smallint[];
BEGIN
    WITH r AS (
        UPDATE work_queue w SET state = 'pending', claimed_by = NULL, lease_until = NULL,
               not_before = now() + make_interval(secs => p_delay_ms / 1000.0), last_error = p_reason
          FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
         WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id AND w.claim_epoch = i.epoch AND w.state = 'claimed'
        RETURNING w.kind, w.kind_version, w.claim_lo)
    SELECT array_agg(kind), array_agg(kind_version), array_agg(claim_lo) INTO v_kinds, v_vers, v_los FROM r;
    IF v_kinds IS NULL THEN RETURN 0; END IF;
    PERFORM inflight_release(v_kinds, v_vers, v_los);
    RETURN cardinality(v_kinds);
END
$$;
