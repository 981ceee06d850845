-- The reconcile engine: scheduling gates, the reactive cascade, claims fenced by
-- claim_epoch, completions into the outbox, the drain that applies outcomes
-- (status, conditions, composition, value flows), and the reaper's passes.
-- Every hot path is set-based and shard-range scoped; every wake is a coalesced
-- latency hint, never a source of truth.

-- +goose Up

-- notify_gated fires at most one pg_notify per channel per 50 ms window across
-- all backends, without blocking any caller: an unlocked read turns away almost
-- every caller, a non-blocking advisory lock picks one winner per window.
-- +goose StatementBegin
CREATE FUNCTION notify_gated(p_channel text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_last timestamptz;
BEGIN
    SELECT last_notified INTO v_last FROM wake_state WHERE channel = p_channel;
    IF v_last > clock_timestamp() - interval '50 milliseconds' THEN
        RETURN;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('notify_gated:' || p_channel)) THEN
        RETURN;
    END IF;
    UPDATE wake_state SET last_notified = clock_timestamp() WHERE channel = p_channel;
    PERFORM pg_notify(p_channel, '');
END
$$;
-- +goose StatementEnd

-- pointer_path turns an RFC 6901 JSON pointer into a jsonb path array.
-- +goose StatementBegin
CREATE FUNCTION pointer_path(p text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p = '' THEN '{}'::text[] ELSE
        array(SELECT replace(replace(t, '~1', '/'), '~0', '~')
              FROM unnest(string_to_array(substr(p, 2), '/')) WITH ORDINALITY AS s(t, i) ORDER BY i)
    END
$$;
-- +goose StatementEnd

-- apply_flows sets each {p: pointer, v: value} of flows into doc.
-- +goose StatementBegin
CREATE FUNCTION apply_flows(doc jsonb, flows jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    f jsonb;
BEGIN
    IF flows IS NULL THEN RETURN doc; END IF;
    FOR f IN SELECT * FROM jsonb_array_elements(flows) LOOP
        IF f->'v' IS NOT NULL AND f->>'p' IS NOT NULL THEN
            doc := jsonb_set(coalesce(doc, '{}'), pointer_path(f->>'p'), f->'v', true);
        END IF;
    END LOOP;
    RETURN doc;
END
$$;
-- +goose StatementEnd

-- log_events appends one event per resource id.
-- +goose StatementBegin
CREATE FUNCTION log_events(p_ids uuid[], p_type text, p_message text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO resource_events (resource_id, type, generation, message)
    SELECT r.id, p_type, r.generation, p_message FROM resources r WHERE r.id = ANY (p_ids)
$$;
-- +goose StatementEnd

-- Scheduling runs once per apply, so its plan is cached: a custom plan per
-- call (the default for array parameters) re-plans a partitioned INSERT ...
-- ON CONFLICT every time, which costs more than the insert. Every lookup is
-- keyed (id = ANY), so the generic plan is as good as a custom one.
-- enqueue_reconcile upserts reconcile rows. The ON CONFLICT arm is the
-- generation gate that makes scheduling idempotent: a done row re-pends, a newer
-- generation supersedes a pending one, and an in-flight row is only marked so
-- the drain re-evaluates it (never two live tasks for one resource).
-- +goose StatementBegin
CREATE FUNCTION enqueue_reconcile(p_ids uuid[], p_triggers text[]) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n int;
BEGIN
    WITH c AS (
        SELECT r.id, r.shard_id, r.kind, r.kind_version, r.generation, t.trig
        FROM unnest(p_ids, p_triggers) AS t(id, trig)
        JOIN resources r ON r.id = t.id
        WHERE r.id = ANY (p_ids) -- an index lookup whatever the array's size
    ), up AS (
        INSERT INTO work_queue AS w (shard_id, resource_id, task_type, kind, kind_version, generation, trigger)
        SELECT shard_id, id, 'reconcile', kind, kind_version, generation, trig FROM c
        ON CONFLICT (shard_id, resource_id, task_type) DO UPDATE SET
            generation   = GREATEST(w.generation, EXCLUDED.generation),
            kind         = CASE WHEN w.state IN ('pending','done') THEN EXCLUDED.kind ELSE w.kind END,
            kind_version = CASE WHEN w.state IN ('pending','done') THEN EXCLUDED.kind_version ELSE w.kind_version END,
            trigger      = CASE WHEN w.state IN ('pending','done') THEN EXCLUDED.trigger ELSE w.trigger END,
            rollup_dirty = w.rollup_dirty OR (w.state IN ('claimed','completed') AND EXCLUDED.trigger = 'childrenSettled'),
            state        = CASE WHEN w.state = 'done' THEN 'pending' ELSE w.state END,
            attempts     = CASE WHEN w.state = 'done' OR EXCLUDED.generation > w.generation THEN 0 ELSE w.attempts END,
            not_before   = CASE WHEN w.state = 'done' OR (w.state = 'pending' AND EXCLUDED.generation > w.generation)
                                THEN now() ELSE w.not_before END,
            enqueued_at  = CASE WHEN w.state = 'done' THEN now() ELSE w.enqueued_at END
        WHERE w.state = 'done'
           OR EXCLUDED.generation > w.generation
           OR (w.state = 'pending' AND w.trigger <> EXCLUDED.trigger)
           OR (w.state IN ('claimed','completed') AND EXCLUDED.trigger = 'childrenSettled' AND NOT w.rollup_dirty)
        RETURNING w.resource_id, w.state
    )
    SELECT count(*) FILTER (WHERE state = 'pending') INTO n FROM up;
    IF n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- schedule_eligible is the gate. A resource gets a reconcile task when it lags
-- (generation > synced_gen), is live (not deleting, not frozen, not terminally
-- failed for this generation), and either its specChange reaction is due and
-- every upstream is synced, or its rollup is due and no child still progresses.
-- A kind with nothing to run is synced on the spot.
-- +goose StatementBegin
CREATE FUNCTION schedule_eligible(p_ids uuid[]) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_ids uuid[];
    v_trigs text[];
    v_noop uuid[];
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN RETURN 0; END IF;
    -- MATERIALIZED forces the primary-key lookup: otherwise the planner may
    -- walk idx_resources_lagging (whose predicate the gate repeats) with
    -- id = ANY as a filter, which costs O(every lagging resource) per call.
    WITH t AS MATERIALIZED (
        SELECT * FROM resources WHERE id = ANY (p_ids)
    ), c AS (
        SELECT r.id,
            CASE
                WHEN r.spec_gen < r.generation AND m.spec_reaction IS NOT NULL THEN
                    CASE WHEN NOT EXISTS (
                        SELECT 1 FROM resource_deps d JOIN resources u ON u.id = d.dependency_id
                        WHERE d.dependent_id = r.id AND u.synced_gen < u.generation)
                    THEN 'specChange' END
                WHEN m.rollup_reaction IS NOT NULL THEN
                    CASE WHEN NOT EXISTS (
                        SELECT 1 FROM resources ch
                        WHERE ch.owner_id = r.id AND ch.synced_gen < ch.generation
                          AND ch.failure_gen <> ch.generation AND ch.frozen_until IS NULL)
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
    SELECT array_agg(id) FILTER (WHERE trig IN ('specChange','childrenSettled')),
           array_agg(trig) FILTER (WHERE trig IN ('specChange','childrenSettled')),
           array_agg(id) FILTER (WHERE trig = 'noop')
      INTO v_ids, v_trigs, v_noop
      FROM c;
    IF v_noop IS NOT NULL THEN
        UPDATE resources SET spec_gen = generation, synced_gen = generation WHERE id = ANY (v_noop);
    END IF;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    RETURN enqueue_reconcile(v_ids, v_trigs);
END
$$;
-- +goose StatementEnd

-- schedule_rollup re-runs the rollup of composite roots whose children moved
-- (synced, failed, health flipped), even when the root itself is synced. A root
-- with a child still progressing is armed in rollup_recheck instead: when the
-- last children settle in two concurrent drains, neither snapshot sees "none
-- lagging", and the re-check in a later transaction closes that straddle.
-- +goose StatementBegin
CREATE FUNCTION schedule_rollup(p_roots uuid[]) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_ready uuid[];
    v_trigs text[];
BEGIN
    IF p_roots IS NULL OR cardinality(p_roots) = 0 THEN RETURN 0; END IF;
    WITH t AS MATERIALIZED (
        SELECT * FROM resources WHERE id = ANY (p_roots)
    ), c AS (
        SELECT r.id, r.shard_id, EXISTS (
                SELECT 1 FROM resources ch
                WHERE ch.owner_id = r.id AND ch.synced_gen < ch.generation
                  AND ch.failure_gen <> ch.generation AND ch.frozen_until IS NULL) AS lagging
        FROM t r
        JOIN kind_manifest m ON m.kind = r.kind AND m.kind_version = r.kind_version
        WHERE m.rollup_reaction IS NOT NULL
          AND (r.spec_gen >= r.generation OR m.spec_reaction IS NULL)
          AND r.deletion_requested_at IS NULL
          AND r.frozen_until IS NULL
          AND NOT (r.failure_gen = r.generation AND r.failure_terminal)
    ), arm AS (
        INSERT INTO rollup_recheck (shard_id, root_id)
        SELECT shard_id, id FROM c WHERE lagging
        ON CONFLICT DO NOTHING
    )
    SELECT array_agg(id) FILTER (WHERE NOT lagging), array_agg('childrenSettled'::text) FILTER (WHERE NOT lagging)
      INTO v_ready, v_trigs FROM c;
    IF v_ready IS NULL THEN RETURN 0; END IF;
    RETURN enqueue_reconcile(v_ready, v_trigs);
END
$$;
-- +goose StatementEnd

-- drain_rollup_rechecks re-evaluates armed roots in a fresh snapshot.
-- +goose StatementBegin
CREATE FUNCTION drain_rollup_rechecks(p_lo int, p_hi int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_roots uuid[];
BEGIN
    WITH d AS (
        DELETE FROM rollup_recheck q
        WHERE (q.shard_id, q.root_id) IN (
            SELECT shard_id, root_id FROM rollup_recheck
            WHERE shard_id BETWEEN p_lo AND p_hi
            LIMIT p_limit FOR UPDATE SKIP LOCKED)
        RETURNING q.root_id)
    SELECT array_agg(root_id) INTO v_roots FROM d;
    IF v_roots IS NULL THEN RETURN 0; END IF;
    -- Roots still lagging are re-armed by schedule_rollup only if they still
    -- lag; the lagging child's own sync will fire the rollup later anyway, so
    -- drop rather than re-arm to keep the queue from spinning.
    WITH c AS (
        SELECT r.id FROM resources r
        WHERE r.id = ANY (v_roots)
          AND NOT EXISTS (
                SELECT 1 FROM resources ch
                WHERE ch.owner_id = r.id AND ch.synced_gen < ch.generation
                  AND ch.failure_gen <> ch.generation AND ch.frozen_until IS NULL))
    SELECT array_agg(id) INTO v_roots FROM c;
    IF v_roots IS NULL THEN RETURN 0; END IF;
    RETURN schedule_rollup(v_roots);
END
$$;
-- +goose StatementEnd

-- cascade_on_ready_change makes scheduling reactive: when a statement syncs a
-- resource, its direct dependents are scheduled; when a child syncs, fails or
-- flips health, its composite root's rollup re-runs (promotion and demotion).
-- +goose StatementBegin
CREATE FUNCTION cascade_on_ready_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_deps uuid[];
    v_roots uuid[];
BEGIN
    -- An upsert that only inserted still fires the UPDATE statement trigger.
    IF NOT EXISTS (SELECT 1 FROM new_rows) THEN
        RETURN NULL;
    END IF;
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
      INTO v_deps, v_roots;
    IF v_deps IS NOT NULL THEN
        PERFORM schedule_eligible(v_deps);
    END IF;
    IF v_roots IS NOT NULL THEN
        PERFORM schedule_rollup(v_roots);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER cascade_on_ready_change AFTER UPDATE ON resources
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION cascade_on_ready_change();

-- claim_tasks claims up to p_limit pending tasks in [p_lo, p_hi] for the
-- (kind/version) pairs the caller can serve (NULL = any). It bumps claim_epoch
-- (the fence), stamps the lease and the deadline from kind_config, resolves the
-- reaction from the manifest, and holds each capped kind to max_inflight: the
-- budget is max_inflight minus the sum of kind_inflight partials, read under a
-- per-kind transaction lock so concurrent claimers cannot both spend it.
-- +goose StatementBegin
CREATE FUNCTION claim_tasks(p_claimer text, p_lo int, p_hi int, p_pairs text[], p_limit int, p_lease_secs int)
RETURNS TABLE (task_id uuid, shard_id smallint, resource_id uuid, task_type text, trigger text,
               reaction text, emits int, kind text, kind_version smallint, generation bigint,
               claim_epoch bigint, attempts int, deadline timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_shards smallint[];
    v_rids uuid[];
    v_types text[];
    v_kinds text[];
    v_vers smallint[];
    cap record;
    v_used int;
    v_budget_kinds text[] := '{}';
    v_budget_vers smallint[] := '{}';
    v_budgets int[] := '{}';
BEGIN
    SELECT array_agg(c.shard_id), array_agg(c.resource_id), array_agg(c.task_type), array_agg(c.kind), array_agg(c.kind_version)
      INTO v_shards, v_rids, v_types, v_kinds, v_vers
      FROM (SELECT w.shard_id, w.resource_id, w.task_type, w.kind, w.kind_version
              FROM work_queue w
             WHERE w.shard_id BETWEEN p_lo AND p_hi
               AND w.state = 'pending'
               AND w.not_before <= now()
               AND (p_pairs IS NULL OR (w.kind || '/' || w.kind_version) = ANY (p_pairs))
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) c;
    IF v_rids IS NULL THEN RETURN; END IF;

    FOR cap IN
        SELECT DISTINCT k.kind, k.kind_version, kc.max_inflight
          FROM unnest(v_kinds, v_vers) AS k(kind, kind_version)
          JOIN kind_config kc ON kc.kind = k.kind AND kc.kind_version = k.kind_version
         WHERE kc.max_inflight > 0
         ORDER BY 1, 2
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext('kind_cap:' || cap.kind || '/' || cap.kind_version));
        SELECT coalesce(sum(i.in_flight), 0) INTO v_used
          FROM kind_inflight i WHERE i.kind = cap.kind AND i.kind_version = cap.kind_version;
        v_budget_kinds := v_budget_kinds || cap.kind;
        v_budget_vers := v_budget_vers || cap.kind_version;
        v_budgets := v_budgets || GREATEST(cap.max_inflight - v_used, 0);
    END LOOP;

    RETURN QUERY
    WITH cand AS (
        SELECT c.*, row_number() OVER (PARTITION BY c.kind, c.kind_version) AS rn
          FROM unnest(v_shards, v_rids, v_types, v_kinds, v_vers) AS c(shard_id, resource_id, task_type, kind, kind_version)
    ), budget AS (
        SELECT * FROM unnest(v_budget_kinds, v_budget_vers, v_budgets) AS b(kind, kind_version, n)
    ), sel AS (
        SELECT cand.* FROM cand
        LEFT JOIN budget b ON b.kind = cand.kind AND b.kind_version = cand.kind_version
        WHERE b.n IS NULL OR cand.rn <= b.n
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
                          END,
            emits       = CASE w.trigger
                            WHEN 'specChange' THEN m.spec_emits
                            WHEN 'childrenSettled' THEN m.rollup_emits
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
-- +goose StatementEnd

-- inflight_release gives capped kinds back their tokens for tasks leaving
-- the claimed state.
-- +goose StatementBegin
CREATE FUNCTION inflight_release(p_kinds text[], p_vers smallint[], p_los smallint[]) RETURNS void
LANGUAGE sql AS $$
    UPDATE kind_inflight i SET in_flight = GREATEST(i.in_flight - x.n, 0)
      FROM (SELECT k.kind, k.kind_version, k.lo, count(*) AS n
              FROM unnest(p_kinds, p_vers, p_los) AS k(kind, kind_version, lo)
              JOIN kind_config kc ON kc.kind = k.kind AND kc.kind_version = k.kind_version
             WHERE kc.max_inflight > 0
             GROUP BY 1, 2, 3) x
     WHERE i.kind = x.kind AND i.kind_version = x.kind_version AND i.range_lo = x.lo
$$;
-- +goose StatementEnd

-- complete_tasks records outcomes for claimed tasks. An outcome is accepted only
-- if its row is still claimed at that claim_epoch (applied, and not listed in
-- the result); a repeat of the last accepted completion is 'duplicate' (a
-- no-op success); anything else is 'superseded' (the claim was reclaimed or
-- re-pended, or its resource is gone).
-- +goose StatementBegin
CREATE FUNCTION complete_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[],
                               p_outcomes jsonb[], p_errors text[], p_terminals boolean[])
RETURNS TABLE (task_id uuid, result text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_applied uuid[];
    v_kinds text[];
    v_vers smallint[];
    v_los smallint[];
BEGIN
    WITH input AS (
        SELECT * FROM unnest(p_task_ids, p_shards, p_epochs, p_outcomes, p_errors, p_terminals)
            AS t(task_id, shard_id, epoch, outcome, error, terminal)
    ), done AS (
        UPDATE work_queue w SET state = 'completed', completed_epoch = i.epoch, lease_until = NULL
          FROM input i
         WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id
           AND w.claim_epoch = i.epoch AND w.state = 'claimed'
        RETURNING w.shard_id, w.resource_id, w.task_id, w.task_type, w.trigger, w.claim_epoch, w.claimed_gen,
                  w.emits, w.kind, w.kind_version, w.claim_lo,
                  i.outcome AS i_outcome, i.error AS i_error, i.terminal AS i_terminal
    ), ob AS (
        INSERT INTO work_outbox (shard_id, resource_id, task_id, task_type, kind, kind_version, trigger, claim_epoch, generation, emits, outcome, error, terminal)
        SELECT d.shard_id, d.resource_id, d.task_id, d.task_type, d.kind, d.kind_version, d.trigger, d.claim_epoch, d.claimed_gen, d.emits,
               d.i_outcome, d.i_error, coalesce(d.i_terminal, false)
          FROM done d
        RETURNING 1
    )
    SELECT array_agg(d.task_id), array_agg(d.kind), array_agg(d.kind_version), array_agg(d.claim_lo)
      INTO v_applied, v_kinds, v_vers, v_los
      FROM done d;
    IF v_applied IS NOT NULL THEN
        PERFORM inflight_release(v_kinds, v_vers, v_los);
        PERFORM notify_gated('outbox_ready');
    END IF;
    -- Only the tasks not applied are answered; the caller takes silence for
    -- 'applied', so the common case costs no second probe per task.
    RETURN QUERY
    SELECT i.task_id,
           CASE WHEN w.task_id IS NOT NULL AND w.completed_epoch = i.epoch AND w.claim_epoch = i.epoch THEN 'duplicate'
                ELSE 'superseded' END
      FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
      LEFT JOIN unnest(v_applied) AS a(task_id) ON a.task_id = i.task_id
      LEFT JOIN work_queue w ON w.shard_id = i.shard_id AND w.task_id = i.task_id
     WHERE a.task_id IS NULL;
END
$$;
-- +goose StatementEnd

-- schedule_applied schedules the resource an API apply just wrote. A
-- resource this transaction created has no dependencies and no task yet, so
-- it takes one plain insert (the hot path of a bulk import); anything else
-- goes through schedule_eligible.
-- +goose StatementBegin
CREATE FUNCTION schedule_applied(p_kind text, p_name text) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    r record;
BEGIN
    SELECT res.id, res.shard_id, res.kind, res.kind_version, res.generation,
           res.created_at = now() AND res.generation = 1 AS fresh, m.spec_reaction
      INTO r
      FROM resources res
      JOIN kind_manifest m ON m.kind = res.kind AND m.kind_version = res.kind_version
     WHERE res.kind = p_kind AND res.name = p_name
       AND res.updated_at = now() AND res.synced_gen < res.generation;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF r.fresh AND r.spec_reaction IS NOT NULL THEN
        INSERT INTO work_queue (shard_id, resource_id, task_type, kind, kind_version, generation, trigger)
        VALUES (r.shard_id, r.id, 'reconcile', r.kind, r.kind_version, r.generation, 'specChange');
        PERFORM notify_gated('work_ready');
        RETURN 1;
    END IF;
    RETURN schedule_eligible(ARRAY[r.id]);
END
$$;
-- +goose StatementEnd

-- A removed resource takes its queued work and its events with it (the queue
-- is UNLOGGED and partitioned, and events are written on the hot path, so
-- neither carries a foreign key).
-- +goose StatementBegin
CREATE FUNCTION resources_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM work_queue w USING old_rows o WHERE w.shard_id = o.shard_id AND w.resource_id = o.id;
    DELETE FROM resource_events e USING old_rows o WHERE e.resource_id = o.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER resources_after_delete AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION resources_after_delete();

-- +goose Down
DROP FUNCTION IF EXISTS schedule_applied, complete_tasks, inflight_release, claim_tasks, drain_rollup_rechecks,
    schedule_rollup, schedule_eligible, enqueue_reconcile, log_events, apply_flows, pointer_path, notify_gated;
DROP TRIGGER IF EXISTS cascade_on_ready_change ON resources;
DROP TRIGGER IF EXISTS resources_after_delete ON resources;
DROP FUNCTION IF EXISTS resources_after_delete;
DROP FUNCTION IF EXISTS cascade_on_ready_change;
