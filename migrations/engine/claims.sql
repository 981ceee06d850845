-- Claims: taking pending tasks (fenced by claim_epoch, held to each kind's
-- max_inflight), keeping them (leases), and giving them back.

-- claim_tasks claims up to p_limit pending tasks in [p_lo, p_hi] for the
-- pairs the caller can serve (NULL = any; claim_routable says which task a
-- pair admits, p_own being the pairs namespaces serve themselves). It bumps
-- claim_epoch (the fence), stamps the lease and the deadline from
-- kind_config, resolves the reaction from the manifest, and holds each
-- capped kind to max_inflight and each capped namespace to its
-- max_in_flight: a budget is the cap minus the sum of its kind_inflight
-- (namespace_inflight) partials, read under a per-kind (per-namespace)
-- transaction lock so concurrent claimers cannot both spend it.
--
-- Its locks, in order: the per-kind claim locks, in (kind, kind_version)
-- order, then the per-namespace ones, by name; the picked rows (SKIP
-- LOCKED: a claim never waits for a work row or a delivery); the
-- kind_inflight rows it spends, in key order, then the namespace_inflight
-- ones. Every writer of kind_inflight and namespace_inflight (a claim, a
-- completion, a release, the reaper) takes its rows in that order and
-- after every other row it writes (the lock order, docs/operations.md), so
-- the writer a claim waits for waits for nothing the claim holds: a claim
-- cannot close a cycle with it
-- (TestCappedClaimRacingACompletionDoesNotDeadlock).
--
-- Budgets are read before any row is picked, and each capped kind takes at
-- most its budget, first; the uncapped kinds fill the rest of the batch. A
-- kind at its cap therefore costs the batch nothing: picking the first
-- pending rows regardless of kind and dropping those over the cap afterwards
-- let a capped kind with a deep backlog fill every batch and starve every
-- other kind (0 claimed while thousands waited).
--
-- Namespaces share each batch (issue #39): while the default namespace is
-- the only one and has no max_in_flight, the claim picks as it always did
-- (one probe of the namespaces table decides). Otherwise every namespace
-- (under its budget) picks its own candidates, up to the batch: its capped
-- kinds' tasks first, each within the kind's budget, then its uncapped
-- ones. The batch takes them round-robin: the first candidate of every
-- namespace, then the second of every namespace, and so on (ties in random
-- order), a capped kind's budget going round the namespaces the same way.
-- So with k namespaces holding claimable tasks, each gets at least
-- min(its claimable tasks, floor(p_limit / k)) of every batch, and what one
-- leaves unused goes to the others: a namespace with a deep backlog cannot
-- starve another. The candidates not taken stay locked (SKIP LOCKED by
-- other claimers) until the claim commits.
--
-- Reactor deliveries (lifecycle_outbox rows) come after the work picks, only
-- if the batch has room, and only when a probe finds a row in the range: a
-- deployment without bindings pays one probe of empty partitions. A row is
-- claimable when never claimed or when its lease lapsed (the claimer died
-- or stalled: re-armed, at-least-once), and its backoff is over. It is
-- routed to its binding's reactor kind: reactor_version if pinned, else the
-- reactor kind's highest version, routed like a work task of its
-- binding's namespace (claim_routable), so it counts against its
-- endpoint's concurrency and breaker. It returns task_type 'react' with
-- the transition and the binding's name; resource_id and generation are
-- the watched resource's and the transition's.
-- A work task returns the traceparent stored with it (the request that
-- scheduled it, if traced; migration 00031), a react task none; both
-- return their namespace.
--
-- A work task also returns its resource's columns (r_*: those RequestBuild
-- reads, request.go's resourceCols), so its request needs no second read
-- of the resource (issue #41). They are read by the statement that claims,
-- after the picks locked the rows: whatever write scheduled a claimed
-- generation committed before the lock, so the resource read is at least
-- as new as the generation claimed, as the later read was. r_found is
-- false, and the other r_* NULL, for a react task (its request reads the
-- live row or its snapshot, as before) and for a work task whose resource
-- is gone.
-- Claims plan their statements once, as the scheduling functions do.
CREATE OR REPLACE FUNCTION claim_tasks(p_claimer text, p_lo int, p_hi int, p_pairs text[], p_own text[], p_limit int, p_lease_secs int)
RETURNS TABLE (task_id uuid, shard_id smallint, resource_id uuid, task_type text, trigger text,
               reaction text, emits int, kind text, kind_version smallint, generation bigint,
               claim_epoch bigint, attempts int, deadline timestamptz, transition text, binding text, traceparent text,
               namespace text, r_found boolean, r_kind text, r_kind_version smallint, r_name text, r_labels jsonb,
               r_spec jsonb, r_status jsonb, r_owner_id uuid, r_provider_config_ref text, r_generation bigint,
               r_synced_gen bigint, r_health_ok boolean, r_failure_gen bigint, r_phase text, r_last_error text,
               r_created_at timestamptz, r_updated_at timestamptz, r_resource_version bigint)
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
    v_ns_names text[] := '{}';
    v_ns_budgets int[] := '{}';
    v_nss text[];
    v_pair_kinds text[];
    v_pair_vers smallint[];
    v_taken int;
BEGIN
    FOR cap IN
        SELECT kc.kind, kc.kind_version, kc.max_inflight
          FROM kind_config kc
         WHERE kc.max_inflight > 0
           AND (p_pairs IS NULL OR (kc.kind || '/' || kc.kind_version) = ANY (p_pairs)
                OR (p_own IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_pairs) p
                                                   WHERE p LIKE '%:' || kc.kind || '/' || kc.kind_version)))
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

    IF NOT EXISTS (SELECT 1 FROM namespaces n WHERE n.name <> 'default' OR n.max_in_flight IS NOT NULL) THEN
        -- One namespace: capped kinds first, each up to its budget; then
        -- the uncapped kinds fill what is left of the batch.
        SELECT array_agg(x.shard_id), array_agg(x.resource_id), array_agg(x.task_type), array_agg(x.kind), array_agg(x.kind_version)
          INTO v_shards, v_rids, v_types, v_kinds, v_vers
          FROM unnest(v_budget_kinds, v_budget_vers, v_budgets) AS b(kind, kind_version, n)
         CROSS JOIN LATERAL (
               SELECT w.shard_id, w.resource_id, w.task_type, w.kind, w.kind_version
                 FROM work_queue w
                WHERE w.namespace = 'default' AND w.kind = b.kind AND w.kind_version = b.kind_version
                  AND w.shard_id BETWEEN p_lo AND p_hi
                  AND w.state = 'pending'
                  AND w.not_before <= now()
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
                       -- Built per row, the pair costs more than the rest of
                       -- the filter: without a capped kind it is not built.
                       AND (cardinality(v_capped) = 0 OR NOT ((w.kind || '/' || w.kind_version) = ANY (v_capped)))
                     LIMIT p_limit - v_taken
                       FOR UPDATE SKIP LOCKED) c;
        END IF;
    ELSE
        FOR cap IN SELECT n.name, n.max_in_flight FROM namespaces n WHERE n.max_in_flight IS NOT NULL ORDER BY 1 LOOP
            PERFORM pg_advisory_xact_lock(hashtext('namespace_cap:' || cap.name));
            SELECT coalesce(sum(i.in_flight), 0) INTO v_used FROM namespace_inflight i WHERE i.namespace = cap.name;
            v_ns_names := v_ns_names || cap.name;
            v_ns_budgets := v_ns_budgets || GREATEST(cap.max_in_flight - v_used, 0);
        END LOOP;
        -- The pairs p_pairs names, bare or namespaced, as (kind, version).
        SELECT array_agg(y.kind), array_agg(y.kind_version) INTO v_pair_kinds, v_pair_vers
          FROM (SELECT DISTINCT left(x.pair, length(x.pair) - strpos(reverse(x.pair), '/')) AS kind,
                       right(x.pair, strpos(reverse(x.pair), '/') - 1)::smallint AS kind_version
                  FROM (SELECT substr(p, strpos(p, ':') + 1) AS pair FROM unnest(p_pairs) p) x) y;
        WITH ns AS (
            SELECT n.name, LEAST(coalesce(b.n, p_limit), p_limit) AS quota
              FROM namespaces n
              LEFT JOIN unnest(v_ns_names, v_ns_budgets) AS b(name, n) ON b.name = n.name
             WHERE coalesce(b.n, p_limit) > 0
        ), cand AS (
            SELECT c.*, row_number() OVER (PARTITION BY c.namespace ORDER BY c.grp) AS rn
              FROM ns CROSS JOIN LATERAL (
                   SELECT u.* FROM (
                       SELECT 0 AS grp, k.*
                         FROM unnest(v_budget_kinds, v_budget_vers, v_budgets) AS b(kind, kind_version, n)
                        CROSS JOIN LATERAL (
                              SELECT w.shard_id, w.resource_id, w.task_type, w.kind, w.kind_version, w.namespace
                                FROM work_queue w
                               WHERE w.namespace = ns.name AND w.kind = b.kind AND w.kind_version = b.kind_version
                                 AND w.shard_id BETWEEN p_lo AND p_hi
                                 AND w.state = 'pending'
                                 AND w.not_before <= now()
                               LIMIT LEAST(b.n, ns.quota)
                                 FOR UPDATE SKIP LOCKED) k
                        WHERE b.n > 0 AND claim_routable(ns.name, b.kind || '/' || b.kind_version, p_pairs, p_own)
                       UNION ALL
                       -- A claimer serving every pair (p_pairs NULL):
                       -- the namespace's tasks in index order.
                       SELECT 1, o.*
                         FROM (SELECT w.shard_id, w.resource_id, w.task_type, w.kind, w.kind_version, w.namespace
                                 FROM work_queue w
                                WHERE p_pairs IS NULL AND w.namespace = ns.name
                                  AND w.shard_id BETWEEN p_lo AND p_hi
                                  AND w.state = 'pending'
                                  AND w.not_before <= now()
                                  AND (cardinality(v_capped) = 0 OR NOT ((w.kind || '/' || w.kind_version) = ANY (v_capped)))
                                LIMIT ns.quota
                                  FOR UPDATE SKIP LOCKED) o
                       UNION ALL
                       -- Otherwise each pair it serves for the namespace,
                       -- by index, so the tasks of pairs it cannot serve
                       -- now (a saturated endpoint's backlog) are never
                       -- read.
                       SELECT 1, o.*
                         FROM unnest(v_pair_kinds, v_pair_vers) AS pp(kind, kind_version)
                        CROSS JOIN LATERAL (
                              SELECT w.shard_id, w.resource_id, w.task_type, w.kind, w.kind_version, w.namespace
                                FROM work_queue w
                               WHERE w.namespace = ns.name AND w.kind = pp.kind AND w.kind_version = pp.kind_version
                                 AND w.shard_id BETWEEN p_lo AND p_hi
                                 AND w.state = 'pending'
                                 AND w.not_before <= now()
                               LIMIT ns.quota
                                 FOR UPDATE SKIP LOCKED) o
                        WHERE claim_routable(ns.name, pp.kind || '/' || pp.kind_version, p_pairs, p_own)
                          AND NOT ((pp.kind || '/' || pp.kind_version) = ANY (v_capped))
                   ) u
                   LIMIT ns.quota) c
        ), kinds AS (
            -- A capped kind's budget goes round the namespaces.
            SELECT c.*, row_number() OVER (PARTITION BY c.grp, c.kind, c.kind_version ORDER BY c.rn, random()) AS krn
              FROM cand c
        ), kept AS (
            SELECT k.*, row_number() OVER (PARTITION BY k.namespace ORDER BY k.rn) AS rn2
              FROM kinds k
              LEFT JOIN unnest(v_budget_kinds, v_budget_vers, v_budgets) AS b(kind, kind_version, n)
                ON k.grp = 0 AND b.kind = k.kind AND b.kind_version = k.kind_version
             WHERE k.grp = 1 OR k.krn <= b.n
        )
        SELECT array_agg(s.shard_id), array_agg(s.resource_id), array_agg(s.task_type), array_agg(s.kind), array_agg(s.kind_version),
               array_agg(s.namespace)
          INTO v_shards, v_rids, v_types, v_kinds, v_vers, v_nss
          FROM (SELECT * FROM kept ORDER BY kept.rn2, random() LIMIT p_limit) s;
    END IF;
    v_taken := coalesce(cardinality(v_rids), 0);
    IF v_rids IS NOT NULL THEN
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
                -- A resync runs the kind's resync reaction, else its spec
                -- reaction, which recomposes only if the kind says so.
                emits       = CASE w.trigger
                                WHEN 'specChange' THEN m.spec_emits
                                WHEN 'childrenSettled' THEN m.rollup_emits
                                WHEN 'resync' THEN CASE
                                    WHEN m.resync_reaction IS NOT NULL
                                        THEN reaction_mask(jsonb_path_query_first(m.reactions, '$[*] ? (@.trigger == "resync")'))
                                    WHEN kc.resync_recomposes THEN m.spec_emits
                                    ELSE m.spec_emits & ~7 END
                                WHEN 'operation' THEN w.emits
                                ELSE reaction_mask(jsonb_path_query_first(m.reactions, '$[*] ? (@.trigger == $t)', jsonb_build_object('t', w.trigger)))
                              END
              FROM sel
              JOIN kind_manifest m ON m.kind = sel.kind AND m.kind_version = sel.kind_version
              JOIN kind_config kc ON kc.kind = sel.kind AND kc.kind_version = sel.kind_version
             WHERE w.shard_id BETWEEN p_lo AND p_hi
               AND w.shard_id = sel.shard_id AND w.resource_id = sel.resource_id AND w.task_type = sel.task_type
            RETURNING w.task_id, w.shard_id, w.resource_id, w.task_type, w.trigger, w.reaction, w.emits,
                      w.kind, w.kind_version, w.claimed_gen, w.claim_epoch, w.attempts, w.deadline, w.traceparent, w.namespace
        ), bump AS (
            INSERT INTO kind_inflight AS i (kind, kind_version, range_lo, in_flight)
            SELECT b.kind, b.kind_version, p_lo, count(*)
              FROM claimed c JOIN budget b ON b.kind = c.kind AND b.kind_version = c.kind_version
             GROUP BY b.kind, b.kind_version
             ORDER BY b.kind, b.kind_version -- key order (p_lo is one)
            ON CONFLICT (kind, kind_version, range_lo) DO UPDATE SET in_flight = i.in_flight + EXCLUDED.in_flight
        )
        SELECT c.task_id, c.shard_id, c.resource_id, c.task_type, c.trigger, c.reaction, c.emits, c.kind, c.kind_version,
               c.claimed_gen, c.claim_epoch, c.attempts, c.deadline, NULL::text, NULL::text, c.traceparent, c.namespace,
               r.id IS NOT NULL, r.kind, r.kind_version, r.name, r.labels, r.spec, r.status, r.owner_id,
               r.provider_config_ref, r.generation, r.synced_gen, r.health_ok, r.failure_gen, r.phase, r.last_error,
               r.created_at, r.updated_at, r.resource_version
          FROM claimed c
          LEFT JOIN resources r ON r.id = c.resource_id;
        -- The capped namespaces' tokens, after the kinds' (the lock order).
        -- Every picked row was claimed: the claim locked them.
        IF cardinality(v_ns_names) > 0 THEN
            INSERT INTO namespace_inflight AS i (namespace, range_lo, in_flight)
            SELECT n.namespace, p_lo, count(*)
              FROM unnest(v_nss) AS n(namespace)
             WHERE n.namespace = ANY (v_ns_names)
             GROUP BY 1
             ORDER BY 1
            ON CONFLICT (namespace, range_lo) DO UPDATE SET in_flight = i.in_flight + EXCLUDED.in_flight;
        END IF;
    END IF;

    IF v_taken >= p_limit OR NOT EXISTS (SELECT 1 FROM lifecycle_outbox l WHERE l.shard_id BETWEEN p_lo AND p_hi) THEN
        RETURN;
    END IF;
    RETURN QUERY
    -- The picked rows are updated by TID, as the drain pops the outbox: a
    -- join by key planned as a rescan of the range's whole outbox for each
    -- picked row, growing with the backlog times the batch.
    WITH pick AS (
        SELECT l.shard_id, l.tableoid AS tab, l.ctid AS tid,
               rk.kind, rk.kind_version, rk.reaction, rk.emits, rk.deadline_secs, b.namespace
          FROM lifecycle_outbox l
          JOIN reactor_bindings b ON b.name = l.binding_name AND b.enabled
         CROSS JOIN LATERAL (
               SELECT m.kind, m.kind_version, m.reactor_reaction AS reaction,
                      reaction_mask(jsonb_path_query_first(m.reactions, '$[*] ? (@.trigger == "reactor")')) AS emits,
                      coalesce(kc.task_deadline_secs, 0) AS deadline_secs
                 FROM kind_manifest m
                 LEFT JOIN kind_config kc ON kc.kind = m.kind AND kc.kind_version = m.kind_version
                WHERE m.kind = b.reactor AND m.is_reactor
                  AND (b.reactor_version IS NULL OR m.kind_version = b.reactor_version)
                ORDER BY m.kind_version DESC
                LIMIT 1) rk
         WHERE l.shard_id BETWEEN p_lo AND p_hi
           AND l.not_before <= now()
           AND (l.claimed_by IS NULL OR l.lease_until <= now())
           AND claim_routable(b.namespace, rk.kind || '/' || rk.kind_version, p_pairs, p_own)
         LIMIT p_limit - v_taken
           FOR UPDATE OF l SKIP LOCKED
    ), claimed AS (
        UPDATE lifecycle_outbox l SET
            claim_epoch = l.claim_epoch + 1,
            claimed_by  = p_claimer,
            claimed_at  = now(),
            lease_until = now() + make_interval(secs => p_lease_secs)
          FROM pick p
         WHERE l.shard_id BETWEEN p_lo AND p_hi
           AND l.shard_id = p.shard_id AND l.tableoid = p.tab AND l.ctid = p.tid
        RETURNING l.task_id, l.shard_id, l.resource_id, p.reaction, p.emits, p.kind, p.kind_version, l.generation,
                  l.claim_epoch, l.attempts, p.deadline_secs, l.transition, l.binding_name, p.namespace
    )
    SELECT c.task_id, c.shard_id, c.resource_id, 'react'::text, 'reactor'::text, c.reaction, c.emits,
           c.kind, c.kind_version, c.generation, c.claim_epoch, c.attempts,
           CASE WHEN c.deadline_secs > 0 THEN now() + make_interval(secs => c.deadline_secs) END,
           c.transition, c.binding_name, NULL::text, c.namespace,
           false, NULL::text, NULL::smallint, NULL::text, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::uuid,
           NULL::text, NULL::bigint, NULL::bigint, NULL::boolean, NULL::bigint, NULL::text, NULL::text,
           NULL::timestamptz, NULL::timestamptz, NULL::bigint
      FROM claimed c;
END
$$;

-- claim_routable says whether a claimer serving p_pairs may claim a task of
-- namespace p_ns and pair p_pair ("kind/version"). A bare pair in p_pairs is
-- served by the default namespace's endpoints, for every namespace that does
-- not serve the pair itself; "namespace:kind/version" is served by that
-- namespace's own endpoints, for its tasks only. p_own lists the
-- "namespace:kind/version" pairs namespaces serve themselves, whether their
-- endpoints are ready or not: such a namespace's tasks of the pair wait for
-- its own endpoints and never go to the default namespace's (NULL: none).
-- NULL p_pairs serves everything (an in-process executor).
CREATE OR REPLACE FUNCTION claim_routable(p_ns text, p_pair text, p_pairs text[], p_own text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_pairs IS NULL
        OR (p_ns || ':' || p_pair) = ANY (p_pairs)
        OR (p_pair = ANY (p_pairs) AND (p_own IS NULL OR NOT (p_ns || ':' || p_pair) = ANY (p_own)))
$$;

-- inflight_release gives capped kinds and capped namespaces back their
-- tokens for tasks leaving the claimed state (p_nss: each task's namespace).
-- It is plpgsql, not SQL, for its cached plan: a SQL function that cannot
-- be inlined (an UPDATE) is planned at every call, a fixed cost that was a
-- sizeable share of every small completion. Without a capped namespace
-- (namespace_inflight is empty) the namespaces cost one probe.
--
-- The rows are locked in key order whatever the plan: the subquery locks
-- them sorted (FOR UPDATE under its ORDER BY), and the UPDATE writes only
-- rows the subquery returned, already locked; the kinds' rows, then the
-- namespaces'. The claim's bump takes them in the same order; two kinds
-- given back in the order a join happened to meet them, beside a claim
-- spending the same two in the other order, could deadlock
-- (TestTokenRowsAreTakenInKeyOrder). Callers call it after every other
-- lock they take (the lock order, docs/operations.md).
CREATE OR REPLACE FUNCTION inflight_release(p_kinds text[], p_vers smallint[], p_los smallint[], p_nss text[]) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    UPDATE kind_inflight i SET in_flight = GREATEST(i.in_flight - x.n, 0)
      FROM (SELECT l.kind, l.kind_version, l.range_lo, k.n
              FROM (SELECT k.kind, k.kind_version, k.lo, count(*) AS n
                      FROM unnest(p_kinds, p_vers, p_los) AS k(kind, kind_version, lo)
                      JOIN kind_config kc ON kc.kind = k.kind AND kc.kind_version = k.kind_version
                     WHERE kc.max_inflight > 0
                     GROUP BY 1, 2, 3) k
              JOIN kind_inflight l ON l.kind = k.kind AND l.kind_version = k.kind_version AND l.range_lo = k.lo
             ORDER BY 1, 2, 3
               FOR UPDATE OF l) x
     WHERE i.kind = x.kind AND i.kind_version = x.kind_version AND i.range_lo = x.range_lo;
    IF EXISTS (SELECT 1 FROM namespace_inflight) THEN
        UPDATE namespace_inflight i SET in_flight = GREATEST(i.in_flight - x.n, 0)
          FROM (SELECT l.namespace, l.range_lo, k.n
                  FROM (SELECT k.namespace, k.lo, count(*) AS n
                          FROM unnest(p_nss, p_los) AS k(namespace, lo)
                         GROUP BY 1, 2) k
                  JOIN namespace_inflight l ON l.namespace = k.namespace AND l.range_lo = k.lo
                 ORDER BY 1, 2
                   FOR UPDATE OF l) x
         WHERE i.namespace = x.namespace AND i.range_lo = x.range_lo;
    END IF;
END
$$;

-- extend_leases renews the leases of tasks still claimed at their epoch and
-- returns the ones it renewed; a task missing from the result was superseded,
-- or its completion already waits in the outbox. The tasks it did not find
-- in work_queue are looked up as reactor deliveries (lifecycle_outbox), so a
-- slow reactor that heartbeats is not re-claimed mid-run.
CREATE OR REPLACE FUNCTION extend_leases(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_lease_secs int)
RETURNS TABLE (task_id uuid)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_held uuid[];
BEGIN
    WITH w AS (
        UPDATE work_queue w SET lease_until = now() + make_interval(secs => p_lease_secs)
          FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
         WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id AND w.claim_epoch = i.epoch AND w.state = 'claimed'
           AND NOT EXISTS (SELECT 1 FROM work_outbox o
                            WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
        RETURNING w.task_id)
    SELECT array_agg(w.task_id) INTO v_held FROM w;
    RETURN QUERY SELECT unnest(v_held);
    IF coalesce(cardinality(v_held), 0) = cardinality(p_task_ids) THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH l AS (
        UPDATE lifecycle_outbox l SET lease_until = now() + make_interval(secs => p_lease_secs)
          FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
         WHERE l.shard_id = i.shard_id AND l.task_id = i.task_id AND l.claim_epoch = i.epoch AND l.claimed_by IS NOT NULL
           AND NOT i.task_id = ANY (coalesce(v_held, '{}'))
        RETURNING l.task_id)
    SELECT l.task_id FROM l;
END
$$;

-- release_tasks gives claimed tasks back without burning an attempt (an
-- endpoint said 429, or nothing could take it): pending again after p_delay_ms.
-- Reactor deliveries are looked up only for the tasks work_queue lacked.
CREATE OR REPLACE FUNCTION release_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_delay_ms int, p_reason text)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_kinds text[];
    v_vers smallint[];
    v_los smallint[];
    v_nss text[];
    n int;
    v_react int := 0;
BEGIN
    WITH r AS (
        UPDATE work_queue w SET state = 'pending', claimed_by = NULL, lease_until = NULL,
               not_before = now() + make_interval(secs => p_delay_ms / 1000.0), last_error = p_reason
          FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
         WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id AND w.claim_epoch = i.epoch AND w.state = 'claimed'
        RETURNING w.kind, w.kind_version, w.claim_lo, w.namespace)
    SELECT array_agg(kind), array_agg(kind_version), array_agg(claim_lo), array_agg(namespace) INTO v_kinds, v_vers, v_los, v_nss FROM r;
    n := coalesce(cardinality(v_kinds), 0);
    IF n < cardinality(p_task_ids) THEN
        -- The rest may be reactor deliveries: given back the same way, with
        -- no attempt counted.
        UPDATE lifecycle_outbox l SET claimed_by = NULL, lease_until = NULL,
               not_before = now() + make_interval(secs => p_delay_ms / 1000.0), last_error = p_reason
          FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
         WHERE l.shard_id = i.shard_id AND l.task_id = i.task_id AND l.claim_epoch = i.epoch AND l.claimed_by IS NOT NULL;
        GET DIAGNOSTICS v_react = ROW_COUNT;
    END IF;
    -- The tokens last: the lock order (docs/operations.md).
    IF v_kinds IS NOT NULL THEN
        PERFORM inflight_release(v_kinds, v_vers, v_los, v_nss);
    END IF;
    RETURN n + v_react;
END
$$;
