-- The lean queue: fewer writes per task, and a resource update the drain can
-- make without touching an index.
--
-- * A work row is pending or claimed, nothing else. A completion no longer
--   updates it: it appends an outbox row, and work_outbox is keyed by the
--   claim (shard_id, task_id, claim_epoch), so a repeat conflicts and is a
--   duplicate. The drain deletes a finished row (a transient failure still
--   re-pends it), so the queue holds only live work. A repeat after the drain
--   is recognised from the resource: last_task_id / last_task_epoch (and
--   last_claimed_at, for the claim -> updated latency).
-- * resources keeps 30% of each page free and no index mentions a column the
--   drain writes, so its update is HOT (measured: 590 -> 210-255 ms per 10k
--   leaves). The two partial "lagging" indexes go: the lagging-child probe
--   walks idx_resources_owner, the reaper's lagging sweep scans (throttled).
-- * The functions that change with it, plus: transition-table joins planned
--   per statement (EXECUTE), 10 ms wake coalescing, compose's fast path for
--   new children, the False-only conditions probe.
-- docs/performance.md has the measurements.

-- +goose Up
DELETE FROM work_queue WHERE state = 'done';
-- A completed row's outcome waits in the outbox: it is a claimed row now.
UPDATE work_queue SET state = 'claimed' WHERE state = 'completed';
ALTER TABLE work_queue DROP CONSTRAINT work_queue_state_check,
    ADD CONSTRAINT work_queue_state_check CHECK (state IN ('pending','claimed')),
    DROP COLUMN completed_epoch;

ALTER TABLE work_outbox DROP CONSTRAINT work_outbox_pkey;
ALTER TABLE work_outbox ADD PRIMARY KEY (shard_id, task_id, claim_epoch);
ALTER TABLE work_outbox ADD COLUMN claimed_at timestamptz;

ALTER TABLE resources
    ADD COLUMN last_task_id    uuid,
    ADD COLUMN last_task_epoch bigint,
    ADD COLUMN last_claimed_at timestamptz;
ALTER TABLE resources SET (fillfactor = 70);
DROP INDEX idx_resources_lagging_child;
DROP INDEX idx_resources_lagging;
-- The drain's probe for stale False conditions to clear: tiny on a healthy fleet.
CREATE INDEX idx_conditions_false ON resource_conditions (resource_id) WHERE status = 'False';

-- Claims plan their statements once, as the scheduling functions do.
ALTER FUNCTION claim_tasks(text, int, int, text[], int, int) SET plan_cache_mode = force_generic_plan;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION notify_gated(p_channel text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_last timestamptz;
BEGIN
    SELECT last_notified INTO v_last FROM wake_state WHERE channel = p_channel;
    IF v_last > clock_timestamp() - interval '10 milliseconds' THEN
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION enqueue_reconcile(p_ids uuid[], p_triggers text[]) RETURNS int
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
            kind         = CASE WHEN w.state = 'pending' THEN EXCLUDED.kind ELSE w.kind END,
            kind_version = CASE WHEN w.state = 'pending' THEN EXCLUDED.kind_version ELSE w.kind_version END,
            trigger      = CASE WHEN w.state = 'pending' THEN EXCLUDED.trigger ELSE w.trigger END,
            rollup_dirty = w.rollup_dirty OR (w.state = 'claimed' AND EXCLUDED.trigger = 'childrenSettled'),
            attempts     = CASE WHEN EXCLUDED.generation > w.generation THEN 0 ELSE w.attempts END,
            not_before   = CASE WHEN w.state = 'pending' AND EXCLUDED.generation > w.generation
                                THEN now() ELSE w.not_before END
        WHERE EXCLUDED.generation > w.generation
           OR (w.state = 'pending' AND w.trigger <> EXCLUDED.trigger)
           OR (w.state = 'claimed' AND EXCLUDED.trigger = 'childrenSettled' AND NOT w.rollup_dirty)
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cascade_on_ready_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_deps uuid[];
    v_roots uuid[];
BEGIN
    -- An upsert that only inserted still fires the UPDATE statement trigger.
    IF NOT EXISTS (SELECT 1 FROM new_rows) THEN
        RETURN NULL;
    END IF;
    -- EXECUTE plans the join for this statement's transition tables: a
    -- cached plan is made once per session (the query has no parameters),
    -- and one made for a 1-row update nested-loops over a 2,000-row drain
    -- batch (measured: 200 ms per batch instead of ~1 ms).
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
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP FUNCTION complete_tasks(uuid[], smallint[], bigint[], jsonb[], text[], boolean[]);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION complete_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_resource_ids uuid[],
                               p_outcomes jsonb[], p_errors text[], p_terminals boolean[])
RETURNS TABLE (task_id uuid, result text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    v_applied uuid[];
BEGIN
    WITH ins AS (
        INSERT INTO work_outbox (shard_id, resource_id, task_id, task_type, kind, kind_version, trigger, claim_epoch, claimed_at, generation, emits, outcome, error, terminal)
        SELECT w.shard_id, w.resource_id, w.task_id, w.task_type, w.kind, w.kind_version, w.trigger, w.claim_epoch, w.claimed_at, w.claimed_gen, w.emits,
               i.outcome, i.error, coalesce(i.terminal, false)
          FROM unnest(p_task_ids, p_shards, p_epochs, p_outcomes, p_errors, p_terminals)
                 AS i(task_id, shard_id, epoch, outcome, error, terminal)
          JOIN work_queue w ON w.shard_id = i.shard_id AND w.task_id = i.task_id
         WHERE w.claim_epoch = i.epoch AND w.state = 'claimed'
           -- A repeat while the drain is finishing the task sees its outbox
           -- row still (the delete is not committed) and does not wait on it.
           AND NOT EXISTS (SELECT 1 FROM work_outbox o
                            WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
        ON CONFLICT (shard_id, task_id, claim_epoch) DO NOTHING
        RETURNING work_outbox.task_id
    )
    SELECT array_agg(ins.task_id) INTO v_applied FROM ins;
    IF v_applied IS NOT NULL THEN
        PERFORM notify_gated('outbox_ready');
    END IF;
    -- Only the tasks not applied are answered; the caller takes silence for
    -- 'applied', so the common case costs no second probe per task.
    RETURN QUERY
    SELECT i.task_id,
           CASE WHEN EXISTS (SELECT 1 FROM work_outbox o
                              WHERE o.shard_id = i.shard_id AND o.task_id = i.task_id AND o.claim_epoch = i.epoch)
                  OR EXISTS (SELECT 1 FROM resources r
                              WHERE r.id = i.resource_id AND r.last_task_id = i.task_id AND r.last_task_epoch = i.epoch)
                THEN 'duplicate' ELSE 'superseded' END
      FROM unnest(p_task_ids, p_shards, p_epochs, p_resource_ids) AS i(task_id, shard_id, epoch, resource_id)
      LEFT JOIN unnest(v_applied) AS a(task_id) ON a.task_id = i.task_id
     WHERE a.task_id IS NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION resources_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- EXECUTE: planned for this statement's transition table (see
    -- cascade_on_ready_change).
    EXECUTE 'DELETE FROM work_queue w USING old_rows o WHERE w.shard_id = o.shard_id AND w.resource_id = o.id';
    EXECUTE 'DELETE FROM resource_events e USING old_rows o WHERE e.resource_id = o.id';
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION apply_compose(p_root uuid, p_outcome jsonb, p_emits int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_bad text;
    v_ids uuid[];
    v_pruned uuid[];
    v_new int := 0;
    v_flows boolean := jsonb_path_exists(p_outcome, '$.edges[*].values[*]');
    v_new_ids uuid[];
    v_new_shards smallint[];
    v_new_kinds text[];
    v_new_vers smallint[];
    v_queued uuid[];
BEGIN
    PERFORM 1 FROM resources WHERE id = p_root FOR UPDATE;
    IF NOT FOUND THEN RETURN; END IF;

    IF p_emits & 4 <> 0 AND jsonb_typeof(p_outcome->'configs') = 'array' THEN
        SELECT c->>'name' INTO v_bad
          FROM jsonb_array_elements(p_outcome->'configs') c
          JOIN providerconfigs pc ON pc.name = c->>'name'
         WHERE pc.owner_id IS DISTINCT FROM p_root LIMIT 1;
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'provider config % already exists and is not owned by this resource', v_bad;
        END IF;
        INSERT INTO providerconfigs AS pc (name, kind, kind_version, is_default, spec, data, owner_id)
        SELECT c->>'name', c->>'kind', (c->>'kind_version')::smallint, coalesce((c->>'is_default')::boolean, false),
               coalesce(c->'spec', '{}'), decode(c->>'data', 'base64'), p_root
          FROM jsonb_array_elements(p_outcome->'configs') c
        ON CONFLICT (name) DO UPDATE SET
            kind = EXCLUDED.kind, kind_version = EXCLUDED.kind_version, is_default = EXCLUDED.is_default,
            spec = EXCLUDED.spec, data = EXCLUDED.data, updated_at = now()
        WHERE (pc.kind, pc.kind_version, pc.is_default, pc.spec, pc.data)
              IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.kind_version, EXCLUDED.is_default, EXCLUDED.spec, EXCLUDED.data);
    END IF;

    IF p_emits & 1 <> 0 AND jsonb_typeof(p_outcome->'children') = 'array' THEN
        SELECT format('%s/%s', c->>'kind', c->>'name') INTO v_bad
          FROM jsonb_array_elements(p_outcome->'children') c
          JOIN resources r ON r.kind = c->>'kind' AND r.name = c->>'name'
         WHERE r.owner_id IS DISTINCT FROM p_root LIMIT 1;
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'child % already exists and is not owned by this resource', v_bad;
        END IF;
        WITH desired AS (
            SELECT c->>'kind' AS kind, (c->>'kind_version')::smallint AS kind_version, c->>'name' AS name,
                   coalesce(c->'labels', '{}') AS labels, coalesce(c->'spec', '{}') AS spec
              FROM jsonb_array_elements(p_outcome->'children') c
        ), flowed AS (
            -- Only an outcome with value flows pays for a per-child lookup.
            SELECT d.*, CASE WHEN NOT v_flows THEN d.spec ELSE apply_flows(d.spec, (
                SELECT jsonb_agg(jsonb_build_object('p', f->>'dependent_field', 'v', u.status #> pointer_path(f->>'source_field')))
                  FROM jsonb_array_elements(coalesce(p_outcome->'edges', '[]')) e
                  CROSS JOIN LATERAL jsonb_array_elements(coalesce(e->'values', '[]')) f
                  JOIN resources u ON u.kind = e->'dependency'->>'kind' AND u.name = e->'dependency'->>'name'
                 WHERE e->'dependent'->>'kind' = d.kind AND e->'dependent'->>'name' = d.name
                   AND u.status #> pointer_path(f->>'source_field') IS NOT NULL)) END AS fspec
              FROM desired d
        ), up AS (
            INSERT INTO resources AS r (kind, kind_version, name, labels, spec, owner_id)
            SELECT kind, kind_version, name, labels, fspec, p_root FROM flowed
            ON CONFLICT (kind, name) DO UPDATE SET
                kind_version = EXCLUDED.kind_version,
                labels = EXCLUDED.labels,
                spec = EXCLUDED.spec,
                frozen_until = CASE WHEN r.frozen_until = 'infinity' THEN r.frozen_until END
            WHERE r.owner_id = p_root
              AND (r.kind_version, r.labels, r.spec, r.frozen_until IS NOT NULL AND r.frozen_until <> 'infinity')
                  IS DISTINCT FROM (EXCLUDED.kind_version, EXCLUDED.labels, EXCLUDED.spec, false)
            RETURNING r.id, r.shard_id, r.kind, r.kind_version, (r.generation = 1 AND r.synced_gen = 0 AND r.xmax = 0) AS inserted
        )
        SELECT array_agg(id), count(*) FILTER (WHERE inserted), array_agg(id) FILTER (WHERE inserted),
               array_agg(shard_id) FILTER (WHERE inserted), array_agg(kind) FILTER (WHERE inserted),
               array_agg(kind_version) FILTER (WHERE inserted)
          INTO v_ids, v_new, v_new_ids, v_new_shards, v_new_kinds, v_new_vers FROM up;

        -- Prune what the composer no longer emits.
        WITH gone AS (
            SELECT r.id, coalesce(kc.orphan_grace_secs, 0) AS grace
              FROM resources r
              LEFT JOIN kind_config kc ON kc.kind = r.kind AND kc.kind_version = r.kind_version
             WHERE r.owner_id = p_root
               AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_outcome->'children') c
                                WHERE c->>'kind' = r.kind AND c->>'name' = r.name)
        ), orphaned AS (
            UPDATE resources r SET frozen_until = now() + make_interval(secs => g.grace)
              FROM gone g WHERE r.id = g.id AND g.grace > 0 AND r.frozen_until IS NULL
            RETURNING r.id
        ), deleted AS (
            DELETE FROM resources r USING gone g WHERE r.id = g.id AND g.grace = 0
            RETURNING r.id
        )
        SELECT array_agg(id) INTO v_pruned FROM (SELECT id FROM orphaned UNION ALL SELECT id FROM deleted) x;
        IF v_ids IS NOT NULL OR v_pruned IS NOT NULL THEN
            INSERT INTO resource_events (resource_id, type, generation, message)
            SELECT p_root, 'composed', r.generation,
                   format('%s children upserted (%s new), %s pruned', coalesce(cardinality(v_ids), 0), v_new, coalesce(cardinality(v_pruned), 0))
              FROM resources r WHERE r.id = p_root;
        END IF;
    END IF;

    IF p_emits & 2 <> 0 AND jsonb_typeof(p_outcome->'edges') = 'array' THEN
        CREATE TEMP TABLE IF NOT EXISTS compose_edges (dependent_id uuid, dependency_id uuid, value_flows jsonb) ON COMMIT DELETE ROWS;
        TRUNCATE compose_edges;
        INSERT INTO compose_edges
        SELECT dep.id, up.id, coalesce(e->'values', '[]')
          FROM jsonb_array_elements(p_outcome->'edges') e
          LEFT JOIN resources dep ON dep.kind = e->'dependent'->>'kind' AND dep.name = e->'dependent'->>'name'
          LEFT JOIN resources up ON up.kind = e->'dependency'->>'kind' AND up.name = e->'dependency'->>'name';
        SELECT 'an edge names a resource that does not exist' INTO v_bad
          FROM compose_edges WHERE dependent_id IS NULL OR dependency_id IS NULL LIMIT 1;
        IF v_bad IS NOT NULL THEN RAISE EXCEPTION '%', v_bad; END IF;
        DELETE FROM resource_deps d
         WHERE d.owner_id = p_root
           AND NOT EXISTS (SELECT 1 FROM compose_edges c WHERE c.dependent_id = d.dependent_id AND c.dependency_id = d.dependency_id);
        INSERT INTO resource_deps AS d (dependent_id, dependency_id, owner_id, value_flows)
        SELECT DISTINCT ON (dependent_id, dependency_id) dependent_id, dependency_id, p_root, value_flows FROM compose_edges
        ON CONFLICT (dependent_id, dependency_id) DO UPDATE SET value_flows = EXCLUDED.value_flows, owner_id = p_root
        WHERE (d.value_flows, d.owner_id) IS DISTINCT FROM (EXCLUDED.value_flows, p_root);
    END IF;

    IF p_emits & 4 <> 0 AND jsonb_typeof(p_outcome->'configs') = 'array' THEN
        DELETE FROM providerconfigs pc
         WHERE pc.owner_id = p_root
           AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_outcome->'configs') c WHERE c->>'name' = pc.name);
    END IF;

    IF v_new_ids IS NOT NULL THEN
        -- A child this outcome created has no task yet: unless an edge holds
        -- it back, it takes one plain queue insert, as an API create does
        -- (schedule_applied). The 10k-child compose spent 275 ms in the gate.
        WITH q AS (
            INSERT INTO work_queue (shard_id, resource_id, task_type, kind, kind_version, generation, trigger)
            SELECT n.shard_id, n.id, 'reconcile', n.kind, n.kind_version, 1, 'specChange'
              FROM unnest(v_new_ids, v_new_shards, v_new_kinds, v_new_vers) AS n(id, shard_id, kind, kind_version)
              JOIN kind_manifest m ON m.kind = n.kind AND m.kind_version = n.kind_version
             WHERE m.spec_reaction IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM resource_deps d WHERE d.dependent_id = n.id)
            RETURNING resource_id)
        SELECT array_agg(resource_id) INTO v_queued FROM q;
        IF v_queued IS NOT NULL THEN
            PERFORM notify_gated('work_ready');
            v_ids := array(SELECT unnest(v_ids) EXCEPT SELECT unnest(v_queued));
        END IF;
    END IF;
    IF v_ids IS NOT NULL THEN
        PERFORM schedule_eligible(v_ids);
    END IF;
END
$$;
-- +goose StatementEnd

DROP TYPE drain_item;
CREATE TYPE drain_item AS (
    resource_id uuid, task_id uuid, claim_epoch bigint, claimed_at timestamptz, trigger text, generation bigint, emits int, outcome jsonb,
    error text, terminal boolean, rerun boolean, rollup_dirty boolean, has_rollup boolean);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION drain_outbox_batch(p_lo int, p_hi int, p_limit int, p_retry_base_ms int, p_retry_max_ms int)
RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_out work_outbox[];
    v_tids tid[];
    v_tabs oid[];
    o work_outbox;
    v_items drain_item[];
    v_fail_ids uuid[] := '{}';
    v_fail_msgs text[] := '{}';
    v_status_ids uuid[];
    v_rids uuid[];
    v_kinds text[];
    v_vers smallint[];
    v_los smallint[];
    v_ids uuid[];
    v_rollup uuid[];
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
        RETURNING x.*)
    SELECT array_agg(d ORDER BY d.id) INTO v_out FROM d;
    IF v_out IS NULL THEN RETURN 0; END IF;

    -- Composition, one root at a time, for outcomes whose claim still holds;
    -- a bad outcome fails only its own task.
    FOR o IN
        SELECT x.* FROM unnest(v_out) x
          JOIN work_queue w ON w.shard_id = x.shard_id AND w.resource_id = x.resource_id AND w.task_type = x.task_type
         WHERE x.emits & 7 <> 0 AND x.error IS NULL AND x.outcome IS NOT NULL
           AND (x.outcome ? 'children' OR x.outcome ? 'edges' OR x.outcome ? 'configs')
           AND w.claim_epoch = x.claim_epoch AND w.state = 'claimed'
         ORDER BY x.id
    LOOP
        BEGIN
            PERFORM apply_compose(o.resource_id, o.outcome, o.emits);
        EXCEPTION WHEN OTHERS THEN
            v_fail_ids := v_fail_ids || o.task_id;
            v_fail_msgs := v_fail_msgs || ('composition rejected: ' || SQLERRM);
        END;
    END LOOP;

    -- Finalise the work rows still claimed at each outcome's epoch (a stale
    -- outcome matches none and is dropped): a transient failure re-pends
    -- its row with a jittered backoff; anything else deletes it. The
    -- conditions read the row itself, so a concurrent re-schedule that
    -- bumped its generation is seen (EvalPlanQual) and becomes a rerun.
    WITH src AS (
        SELECT x.*, coalesce(f.msg, x.error) AS err, (f.msg IS NOT NULL OR x.terminal) AS term0,
               coalesce(kc.max_transient_attempts, 0) AS max_attempts, m.rollup_reaction IS NOT NULL AS has_rollup
          FROM unnest(v_out) x
          LEFT JOIN unnest(v_fail_ids, v_fail_msgs) AS f(task_id, msg) ON f.task_id = x.task_id
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
            s.err, false, false, w.rollup_dirty, s.has_rollup)::drain_item AS item, w.kind, w.kind_version, w.claim_lo
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
            s.has_rollup)::drain_item AS item, w.kind, w.kind_version, w.claim_lo
    )
    SELECT array_agg(item), array_agg((item).resource_id), array_agg(kind), array_agg(kind_version), array_agg(claim_lo)
      INTO v_items, v_rids, v_kinds, v_vers, v_los
      FROM (SELECT * FROM retry UNION ALL SELECT * FROM fin) x;
    IF v_items IS NULL THEN RETURN 0; END IF;
    -- Capped kinds get their tokens back as their tasks leave the claimed state.
    PERFORM inflight_release(v_kinds, v_vers, v_los);

    SELECT array_agg(i.resource_id) INTO v_status_ids
      FROM unnest(v_items) i JOIN resources r ON r.id = i.resource_id
     WHERE r.id = ANY (v_rids) AND i.error IS NULL AND i.emits & 8 <> 0 AND jsonb_typeof(i.outcome->'status') NOT IN ('null')
       AND r.status IS DISTINCT FROM i.outcome->'status'
       AND EXISTS (SELECT 1 FROM resource_deps d WHERE d.dependency_id = i.resource_id);

    UPDATE resources r SET
        status = CASE WHEN i.error IS NULL AND i.emits & 8 <> 0 AND jsonb_typeof(i.outcome->'status') NOT IN ('null')
                      THEN i.outcome->'status' ELSE r.status END,
        spec_gen = CASE WHEN i.error IS NULL AND i.trigger = 'specChange'
                        THEN GREATEST(r.spec_gen, LEAST(i.generation, r.generation)) ELSE r.spec_gen END,
        synced_gen = CASE WHEN i.error IS NULL AND (i.trigger IN ('childrenSettled','resync') OR (i.trigger = 'specChange' AND NOT i.has_rollup))
                          THEN GREATEST(r.synced_gen, LEAST(i.generation, r.generation)) ELSE r.synced_gen END,
        health_ok = CASE WHEN i.error IS NOT NULL THEN r.health_ok
                         ELSE NOT (i.emits & 16 <> 0 AND coalesce(jsonb_path_exists(i.outcome, '$.conditions[*] ? (@.type == "Ready" && @.status == "False")'), false)) END,
        failure_gen = CASE WHEN i.error IS NULL THEN 0 ELSE i.generation END,
        failure_terminal = CASE WHEN i.error IS NULL THEN false ELSE i.terminal END,
        last_error = i.error,
        last_task_id = i.task_id,
        last_task_epoch = i.claim_epoch,
        last_claimed_at = i.claimed_at,
        updated_at = now()
      FROM unnest(v_items) i
     WHERE r.id = i.resource_id
       AND r.id = ANY (v_rids); -- an index lookup, not a scan of every resource per batch

    -- Conditions: written on transition; a stored False not re-reported is
    -- cleared the moment the resource reconciles cleanly.
    INSERT INTO resource_conditions AS c (resource_id, type, status, reason, message)
    SELECT i.resource_id, x->>'type', x->>'status', coalesce(x->>'reason', ''), coalesce(x->>'message', '')
      FROM unnest(v_items) i CROSS JOIN LATERAL jsonb_array_elements(i.outcome->'conditions') x
     WHERE i.error IS NULL AND i.emits & 16 <> 0 AND jsonb_typeof(i.outcome->'conditions') = 'array'
    UNION ALL
    SELECT i.resource_id, 'Synced', 'False', CASE WHEN i.terminal THEN 'TerminalError' ELSE 'ReconcileError' END, left(i.error, 4096)
      FROM unnest(v_items) i WHERE i.error IS NOT NULL
    ON CONFLICT (resource_id, type) DO UPDATE SET
        status = EXCLUDED.status, reason = EXCLUDED.reason, message = EXCLUDED.message,
        last_transition_time = CASE WHEN c.status <> EXCLUDED.status THEN now() ELSE c.last_transition_time END
    WHERE (c.status, c.reason, c.message) IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message);

    -- (Probed first on idx_conditions_false, which holds only False rows:
    -- on a healthy fleet the batch has none to clear.)
    IF EXISTS (SELECT 1 FROM resource_conditions c WHERE c.status = 'False' AND c.resource_id = ANY (v_rids)) THEN
        DELETE FROM resource_conditions c
         USING unnest(v_items) i
         WHERE c.resource_id = i.resource_id AND i.error IS NULL AND c.status = 'False'
           AND NOT (i.emits & 16 <> 0 AND jsonb_typeof(i.outcome->'conditions') = 'array'
                    AND EXISTS (SELECT 1 FROM jsonb_array_elements(i.outcome->'conditions') x WHERE x->>'type' = c.type));
    END IF;

    INSERT INTO resource_events (resource_id, type, generation, message)
    SELECT i.resource_id, CASE WHEN i.error IS NULL THEN 'succeeded' ELSE 'failed' END, i.generation,
           CASE WHEN i.error IS NULL THEN i.trigger
                ELSE format('%s (%s): %s', i.trigger, CASE WHEN i.terminal THEN 'terminal' ELSE 'transient' END, left(i.error, 1024)) END
      FROM unnest(v_items) i;

    PERFORM substitute_values(v_status_ids);

    -- A leaf's success needs no re-scheduling (its dependents are scheduled
    -- by the cascade); a rerun, a composer's next step or a failure might.
    SELECT array_agg(i.resource_id) FILTER (WHERE i.rerun OR (i.error IS NULL AND i.trigger = 'specChange' AND i.has_rollup)),
           array_agg(i.resource_id) FILTER (WHERE i.rollup_dirty)
      INTO v_ids, v_rollup
      FROM unnest(v_items) i;
    PERFORM schedule_eligible(v_ids);
    PERFORM schedule_rollup(v_rollup);
    RETURN cardinality(v_items);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION reap_expired_leases(p_lo int, p_hi int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    v_kinds text[];
    v_vers smallint[];
    v_los smallint[];
BEGIN
    WITH x AS (
        SELECT shard_id, resource_id, task_type FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi AND state = 'claimed' AND lease_until < now()
           AND NOT EXISTS (SELECT 1 FROM work_outbox o
                            WHERE o.shard_id = work_queue.shard_id AND o.task_id = work_queue.task_id
                              AND o.claim_epoch = work_queue.claim_epoch)
         LIMIT p_limit FOR UPDATE SKIP LOCKED
    ), r AS (
        UPDATE work_queue w SET state = 'pending', claimed_by = NULL, lease_until = NULL, not_before = now(),
               last_error = 'lease expired: the claim holder stopped renewing it'
          FROM x
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.shard_id = x.shard_id AND w.resource_id = x.resource_id AND w.task_type = x.task_type
        RETURNING w.resource_id, w.kind, w.kind_version, w.claim_lo)
    SELECT array_agg(resource_id), array_agg(kind), array_agg(kind_version), array_agg(claim_lo)
      INTO v_ids, v_kinds, v_vers, v_los FROM r;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    PERFORM inflight_release(v_kinds, v_vers, v_los);
    PERFORM log_events(v_ids, 'reclaimed', 'lease expired; task re-pended');
    PERFORM notify_gated('work_ready');
    RETURN cardinality(v_ids);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION requeue_lagging(p_lo int, p_hi int, p_window_secs int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    SELECT array_agg(id) INTO v_ids FROM (
        SELECT r.id FROM resources r
         WHERE r.shard_id BETWEEN p_lo AND p_hi
           AND r.synced_gen < r.generation AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
           AND r.updated_at < now() - make_interval(secs => p_window_secs)
           AND NOT (r.failure_gen = r.generation AND r.failure_terminal)
           AND NOT EXISTS (SELECT 1 FROM work_queue w
                            WHERE w.shard_id = r.shard_id AND w.resource_id = r.id
                              AND w.task_type = 'reconcile')
         LIMIT p_limit) x;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    RETURN schedule_eligible(v_ids);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION delete_unclaimed_work(p_lo int, p_hi int, p_window_secs int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    WITH x AS (
        SELECT shard_id, resource_id, task_type FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi
           AND state = 'pending' AND claim_epoch = 0
           AND enqueued_at < now() - make_interval(secs => p_window_secs)
         LIMIT p_limit FOR UPDATE SKIP LOCKED)
    DELETE FROM work_queue w USING x
     WHERE w.shard_id BETWEEN p_lo AND p_hi
       AND w.shard_id = x.shard_id AND w.resource_id = x.resource_id AND w.task_type = x.task_type;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION expire_async_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_message text)
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
    SELECT array_agg(c.task_id), array_agg(c.shard_id), array_agg(c.claim_epoch), array_agg(c.resource_id)
      INTO v_ids, v_shards, v_epochs, v_rids
      FROM (SELECT w.task_id, w.shard_id, w.claim_epoch, w.resource_id
              FROM work_queue w
              JOIN unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
                ON w.shard_id = i.shard_id AND w.task_id = i.task_id
             WHERE w.claim_epoch = i.epoch AND w.state = 'claimed' AND w.lease_until <= now()
               AND NOT EXISTS (SELECT 1 FROM work_outbox o
                                WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
               FOR UPDATE OF w) c;
    IF v_ids IS NOT NULL THEN
        n := cardinality(v_ids);
        -- A callback that lands between the probe and this insert wins:
        -- the expiry is then not applied and the task reads as gone.
        SELECT array_agg(x.task_id) INTO v_lost
          FROM complete_tasks(v_ids, v_shards, v_epochs, v_rids,
                 array_fill(NULL::jsonb, ARRAY[n]), array_fill(p_message, ARRAY[n]), array_fill(false, ARRAY[n])) x;
    END IF;
    RETURN QUERY
    SELECT i.task_id,
           CASE WHEN i.task_id = ANY (coalesce(v_ids, '{}')) AND NOT i.task_id = ANY (coalesce(v_lost, '{}')) THEN 'expired'
                WHEN w.state = 'claimed' AND w.claim_epoch = i.epoch AND NOT EXISTS (
                        SELECT 1 FROM work_outbox o WHERE o.shard_id = i.shard_id AND o.task_id = i.task_id AND o.claim_epoch = i.epoch)
                     THEN 'held'
                ELSE 'gone' END,
           CASE WHEN w.state = 'claimed' AND w.claim_epoch = i.epoch THEN w.lease_until END
      FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
      LEFT JOIN work_queue w ON w.shard_id = i.shard_id AND w.task_id = i.task_id;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION notify_gated(p_channel text) RETURNS void
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION enqueue_reconcile(p_ids uuid[], p_triggers text[]) RETURNS int
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cascade_on_ready_change() RETURNS trigger
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

DROP FUNCTION complete_tasks(uuid[], smallint[], bigint[], uuid[], jsonb[], text[], boolean[]);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION complete_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[],
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION resources_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM work_queue w USING old_rows o WHERE w.shard_id = o.shard_id AND w.resource_id = o.id;
    DELETE FROM resource_events e USING old_rows o WHERE e.resource_id = o.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION apply_compose(p_root uuid, p_outcome jsonb, p_emits int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_bad text;
    v_ids uuid[];
    v_pruned uuid[];
    v_new int := 0;
BEGIN
    PERFORM 1 FROM resources WHERE id = p_root FOR UPDATE;
    IF NOT FOUND THEN RETURN; END IF;

    IF p_emits & 4 <> 0 AND jsonb_typeof(p_outcome->'configs') = 'array' THEN
        SELECT c->>'name' INTO v_bad
          FROM jsonb_array_elements(p_outcome->'configs') c
          JOIN providerconfigs pc ON pc.name = c->>'name'
         WHERE pc.owner_id IS DISTINCT FROM p_root LIMIT 1;
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'provider config % already exists and is not owned by this resource', v_bad;
        END IF;
        INSERT INTO providerconfigs AS pc (name, kind, kind_version, is_default, spec, data, owner_id)
        SELECT c->>'name', c->>'kind', (c->>'kind_version')::smallint, coalesce((c->>'is_default')::boolean, false),
               coalesce(c->'spec', '{}'), decode(c->>'data', 'base64'), p_root
          FROM jsonb_array_elements(p_outcome->'configs') c
        ON CONFLICT (name) DO UPDATE SET
            kind = EXCLUDED.kind, kind_version = EXCLUDED.kind_version, is_default = EXCLUDED.is_default,
            spec = EXCLUDED.spec, data = EXCLUDED.data, updated_at = now()
        WHERE (pc.kind, pc.kind_version, pc.is_default, pc.spec, pc.data)
              IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.kind_version, EXCLUDED.is_default, EXCLUDED.spec, EXCLUDED.data);
    END IF;

    IF p_emits & 1 <> 0 AND jsonb_typeof(p_outcome->'children') = 'array' THEN
        SELECT format('%s/%s', c->>'kind', c->>'name') INTO v_bad
          FROM jsonb_array_elements(p_outcome->'children') c
          JOIN resources r ON r.kind = c->>'kind' AND r.name = c->>'name'
         WHERE r.owner_id IS DISTINCT FROM p_root LIMIT 1;
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'child % already exists and is not owned by this resource', v_bad;
        END IF;
        WITH desired AS (
            SELECT c->>'kind' AS kind, (c->>'kind_version')::smallint AS kind_version, c->>'name' AS name,
                   coalesce(c->'labels', '{}') AS labels, coalesce(c->'spec', '{}') AS spec
              FROM jsonb_array_elements(p_outcome->'children') c
        ), flowed AS (
            SELECT d.*, apply_flows(d.spec, (
                SELECT jsonb_agg(jsonb_build_object('p', f->>'dependent_field', 'v', u.status #> pointer_path(f->>'source_field')))
                  FROM jsonb_array_elements(coalesce(p_outcome->'edges', '[]')) e
                  CROSS JOIN LATERAL jsonb_array_elements(coalesce(e->'values', '[]')) f
                  JOIN resources u ON u.kind = e->'dependency'->>'kind' AND u.name = e->'dependency'->>'name'
                 WHERE e->'dependent'->>'kind' = d.kind AND e->'dependent'->>'name' = d.name
                   AND u.status #> pointer_path(f->>'source_field') IS NOT NULL)) AS fspec
              FROM desired d
        ), up AS (
            INSERT INTO resources AS r (kind, kind_version, name, labels, spec, owner_id)
            SELECT kind, kind_version, name, labels, fspec, p_root FROM flowed
            ON CONFLICT (kind, name) DO UPDATE SET
                kind_version = EXCLUDED.kind_version,
                labels = EXCLUDED.labels,
                spec = EXCLUDED.spec,
                frozen_until = CASE WHEN r.frozen_until = 'infinity' THEN r.frozen_until END
            WHERE r.owner_id = p_root
              AND (r.kind_version, r.labels, r.spec, r.frozen_until IS NOT NULL AND r.frozen_until <> 'infinity')
                  IS DISTINCT FROM (EXCLUDED.kind_version, EXCLUDED.labels, EXCLUDED.spec, false)
            RETURNING r.id, (r.generation = 1 AND r.synced_gen = 0 AND r.xmax = 0) AS inserted
        )
        SELECT array_agg(id), count(*) FILTER (WHERE inserted) INTO v_ids, v_new FROM up;

        -- Prune what the composer no longer emits.
        WITH gone AS (
            SELECT r.id, coalesce(kc.orphan_grace_secs, 0) AS grace
              FROM resources r
              LEFT JOIN kind_config kc ON kc.kind = r.kind AND kc.kind_version = r.kind_version
             WHERE r.owner_id = p_root
               AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_outcome->'children') c
                                WHERE c->>'kind' = r.kind AND c->>'name' = r.name)
        ), orphaned AS (
            UPDATE resources r SET frozen_until = now() + make_interval(secs => g.grace)
              FROM gone g WHERE r.id = g.id AND g.grace > 0 AND r.frozen_until IS NULL
            RETURNING r.id
        ), deleted AS (
            DELETE FROM resources r USING gone g WHERE r.id = g.id AND g.grace = 0
            RETURNING r.id
        )
        SELECT array_agg(id) INTO v_pruned FROM (SELECT id FROM orphaned UNION ALL SELECT id FROM deleted) x;
        IF v_ids IS NOT NULL OR v_pruned IS NOT NULL THEN
            INSERT INTO resource_events (resource_id, type, generation, message)
            SELECT p_root, 'composed', r.generation,
                   format('%s children upserted (%s new), %s pruned', coalesce(cardinality(v_ids), 0), v_new, coalesce(cardinality(v_pruned), 0))
              FROM resources r WHERE r.id = p_root;
        END IF;
    END IF;

    IF p_emits & 2 <> 0 AND jsonb_typeof(p_outcome->'edges') = 'array' THEN
        CREATE TEMP TABLE IF NOT EXISTS compose_edges (dependent_id uuid, dependency_id uuid, value_flows jsonb) ON COMMIT DELETE ROWS;
        TRUNCATE compose_edges;
        INSERT INTO compose_edges
        SELECT dep.id, up.id, coalesce(e->'values', '[]')
          FROM jsonb_array_elements(p_outcome->'edges') e
          LEFT JOIN resources dep ON dep.kind = e->'dependent'->>'kind' AND dep.name = e->'dependent'->>'name'
          LEFT JOIN resources up ON up.kind = e->'dependency'->>'kind' AND up.name = e->'dependency'->>'name';
        SELECT 'an edge names a resource that does not exist' INTO v_bad
          FROM compose_edges WHERE dependent_id IS NULL OR dependency_id IS NULL LIMIT 1;
        IF v_bad IS NOT NULL THEN RAISE EXCEPTION '%', v_bad; END IF;
        DELETE FROM resource_deps d
         WHERE d.owner_id = p_root
           AND NOT EXISTS (SELECT 1 FROM compose_edges c WHERE c.dependent_id = d.dependent_id AND c.dependency_id = d.dependency_id);
        INSERT INTO resource_deps AS d (dependent_id, dependency_id, owner_id, value_flows)
        SELECT DISTINCT ON (dependent_id, dependency_id) dependent_id, dependency_id, p_root, value_flows FROM compose_edges
        ON CONFLICT (dependent_id, dependency_id) DO UPDATE SET value_flows = EXCLUDED.value_flows, owner_id = p_root
        WHERE (d.value_flows, d.owner_id) IS DISTINCT FROM (EXCLUDED.value_flows, p_root);
    END IF;

    IF p_emits & 4 <> 0 AND jsonb_typeof(p_outcome->'configs') = 'array' THEN
        DELETE FROM providerconfigs pc
         WHERE pc.owner_id = p_root
           AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_outcome->'configs') c WHERE c->>'name' = pc.name);
    END IF;

    IF v_ids IS NOT NULL THEN
        PERFORM schedule_eligible(v_ids);
    END IF;
END
$$;
-- +goose StatementEnd

DROP TYPE drain_item;
CREATE TYPE drain_item AS (
    resource_id uuid, task_id uuid, trigger text, generation bigint, emits int, outcome jsonb,
    error text, terminal boolean, rerun boolean, rollup_dirty boolean, has_rollup boolean);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION drain_outbox_batch(p_lo int, p_hi int, p_limit int, p_retry_base_ms int, p_retry_max_ms int)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_out work_outbox[];
    v_tids tid[];
    v_tabs oid[];
    o work_outbox;
    v_items drain_item[];
    v_fail_ids uuid[] := '{}';
    v_fail_msgs text[] := '{}';
    v_status_ids uuid[];
    v_rids uuid[];
    v_ids uuid[];
    v_rollup uuid[];
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
        RETURNING x.*)
    SELECT array_agg(d ORDER BY d.id) INTO v_out FROM d;
    IF v_out IS NULL THEN RETURN 0; END IF;

    -- Composition, one root at a time; a bad outcome fails only its own task.
    FOREACH o IN ARRAY v_out LOOP
        IF o.error IS NULL AND o.outcome IS NOT NULL AND o.emits & 7 <> 0
           AND (o.outcome ? 'children' OR o.outcome ? 'edges' OR o.outcome ? 'configs') THEN
            BEGIN
                PERFORM apply_compose(o.resource_id, o.outcome, o.emits);
            EXCEPTION WHEN OTHERS THEN
                v_fail_ids := v_fail_ids || o.task_id;
                v_fail_msgs := v_fail_msgs || ('composition rejected: ' || SQLERRM);
            END;
        END IF;
    END LOOP;

    WITH src AS (
        SELECT x.*, coalesce(f.msg, x.error) AS err, (f.msg IS NOT NULL OR x.terminal) AS term0
          FROM unnest(v_out) x
          LEFT JOIN unnest(v_fail_ids, v_fail_msgs) AS f(task_id, msg) ON f.task_id = x.task_id
    ), fin AS (
        UPDATE work_queue w SET
            state = CASE WHEN s.err IS NOT NULL AND NOT s.term0 AND w.generation = w.claimed_gen
                              AND NOT coalesce(kc.max_transient_attempts > 0 AND w.attempts + 1 >= kc.max_transient_attempts, false)
                         THEN 'pending' ELSE 'done' END,
            attempts = CASE WHEN s.err IS NULL THEN 0 ELSE w.attempts + 1 END,
            not_before = CASE WHEN s.err IS NULL THEN w.not_before
                         ELSE now() + make_interval(secs => LEAST(p_retry_max_ms, p_retry_base_ms * power(2, LEAST(w.attempts, 20)))
                                                            * (0.5 + random() / 2) / 1000.0) END,
            last_error = s.err,
            claimed_by = NULL,
            lease_until = NULL
          FROM src s
          LEFT JOIN kind_config kc ON kc.kind = s.kind AND kc.kind_version = s.kind_version
          LEFT JOIN kind_manifest m ON m.kind = s.kind AND m.kind_version = s.kind_version
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.shard_id = s.shard_id AND w.resource_id = s.resource_id AND w.task_type = s.task_type
           AND w.state = 'completed' AND w.completed_epoch = s.claim_epoch
        RETURNING ROW(w.resource_id, s.task_id, s.trigger, s.generation, s.emits, s.outcome,
            CASE WHEN s.err IS NULL THEN NULL
                 WHEN NOT s.term0 AND w.state = 'done' AND w.generation = w.claimed_gen
                      THEN format('gave up after %s transient attempts: %s', w.attempts, s.err)
                 ELSE s.err END,
            s.term0 OR (s.err IS NOT NULL AND w.state = 'done' AND w.generation = w.claimed_gen),
            w.generation > w.claimed_gen,
            w.rollup_dirty,
            m.rollup_reaction IS NOT NULL)::drain_item AS item
    )
    SELECT array_agg(item), array_agg((item).resource_id) INTO v_items, v_rids FROM fin;
    IF v_items IS NULL THEN RETURN 0; END IF;

    SELECT array_agg(i.resource_id) INTO v_status_ids
      FROM unnest(v_items) i JOIN resources r ON r.id = i.resource_id
     WHERE r.id = ANY (v_rids) AND i.error IS NULL AND i.emits & 8 <> 0 AND jsonb_typeof(i.outcome->'status') NOT IN ('null')
       AND r.status IS DISTINCT FROM i.outcome->'status'
       AND EXISTS (SELECT 1 FROM resource_deps d WHERE d.dependency_id = i.resource_id);

    UPDATE resources r SET
        status = CASE WHEN i.error IS NULL AND i.emits & 8 <> 0 AND jsonb_typeof(i.outcome->'status') NOT IN ('null')
                      THEN i.outcome->'status' ELSE r.status END,
        spec_gen = CASE WHEN i.error IS NULL AND i.trigger = 'specChange'
                        THEN GREATEST(r.spec_gen, LEAST(i.generation, r.generation)) ELSE r.spec_gen END,
        synced_gen = CASE WHEN i.error IS NULL AND (i.trigger IN ('childrenSettled','resync') OR (i.trigger = 'specChange' AND NOT i.has_rollup))
                          THEN GREATEST(r.synced_gen, LEAST(i.generation, r.generation)) ELSE r.synced_gen END,
        health_ok = CASE WHEN i.error IS NOT NULL THEN r.health_ok
                         ELSE NOT (i.emits & 16 <> 0 AND coalesce(jsonb_path_exists(i.outcome, '$.conditions[*] ? (@.type == "Ready" && @.status == "False")'), false)) END,
        failure_gen = CASE WHEN i.error IS NULL THEN 0 ELSE i.generation END,
        failure_terminal = CASE WHEN i.error IS NULL THEN false ELSE i.terminal END,
        last_error = i.error,
        updated_at = now()
      FROM unnest(v_items) i
     WHERE r.id = i.resource_id
       AND r.id = ANY (v_rids); -- an index lookup, not a scan of every resource per batch

    -- Conditions: written on transition; a stored False not re-reported is
    -- cleared the moment the resource reconciles cleanly.
    INSERT INTO resource_conditions AS c (resource_id, type, status, reason, message)
    SELECT i.resource_id, x->>'type', x->>'status', coalesce(x->>'reason', ''), coalesce(x->>'message', '')
      FROM unnest(v_items) i CROSS JOIN LATERAL jsonb_array_elements(i.outcome->'conditions') x
     WHERE i.error IS NULL AND i.emits & 16 <> 0 AND jsonb_typeof(i.outcome->'conditions') = 'array'
    UNION ALL
    SELECT i.resource_id, 'Synced', 'False', CASE WHEN i.terminal THEN 'TerminalError' ELSE 'ReconcileError' END, left(i.error, 4096)
      FROM unnest(v_items) i WHERE i.error IS NOT NULL
    ON CONFLICT (resource_id, type) DO UPDATE SET
        status = EXCLUDED.status, reason = EXCLUDED.reason, message = EXCLUDED.message,
        last_transition_time = CASE WHEN c.status <> EXCLUDED.status THEN now() ELSE c.last_transition_time END
    WHERE (c.status, c.reason, c.message) IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message);

    DELETE FROM resource_conditions c
     USING unnest(v_items) i
     WHERE c.resource_id = i.resource_id AND i.error IS NULL AND c.status = 'False'
       AND NOT (i.emits & 16 <> 0 AND jsonb_typeof(i.outcome->'conditions') = 'array'
                AND EXISTS (SELECT 1 FROM jsonb_array_elements(i.outcome->'conditions') x WHERE x->>'type' = c.type));

    INSERT INTO resource_events (resource_id, type, generation, message)
    SELECT i.resource_id, CASE WHEN i.error IS NULL THEN 'succeeded' ELSE 'failed' END, i.generation,
           CASE WHEN i.error IS NULL THEN i.trigger
                ELSE format('%s (%s): %s', i.trigger, CASE WHEN i.terminal THEN 'terminal' ELSE 'transient' END, left(i.error, 1024)) END
      FROM unnest(v_items) i;

    PERFORM substitute_values(v_status_ids);

    -- A leaf's success needs no re-scheduling (its dependents are scheduled
    -- by the cascade); a rerun, a composer's next step or a failure might.
    SELECT array_agg(i.resource_id) FILTER (WHERE i.rerun OR (i.error IS NULL AND i.trigger = 'specChange' AND i.has_rollup)),
           array_agg(i.resource_id) FILTER (WHERE i.rollup_dirty)
      INTO v_ids, v_rollup
      FROM unnest(v_items) i;
    PERFORM schedule_eligible(v_ids);
    PERFORM schedule_rollup(v_rollup);
    RETURN cardinality(v_items);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION extend_leases(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_lease_secs int)
RETURNS TABLE (task_id uuid)
LANGUAGE sql AS $$
    UPDATE work_queue w SET lease_until = now() + make_interval(secs => p_lease_secs)
      FROM unnest(p_task_ids, p_shards, p_epochs) AS i(task_id, shard_id, epoch)
     WHERE w.shard_id = i.shard_id AND w.task_id = i.task_id AND w.claim_epoch = i.epoch AND w.state = 'claimed'
    RETURNING w.task_id
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION reap_expired_leases(p_lo int, p_hi int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    v_kinds text[];
    v_vers smallint[];
    v_los smallint[];
BEGIN
    WITH x AS (
        SELECT shard_id, resource_id, task_type FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi AND state = 'claimed' AND lease_until < now()
         LIMIT p_limit FOR UPDATE SKIP LOCKED
    ), r AS (
        UPDATE work_queue w SET state = 'pending', claimed_by = NULL, lease_until = NULL, not_before = now(),
               last_error = 'lease expired: the claim holder stopped renewing it'
          FROM x
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.shard_id = x.shard_id AND w.resource_id = x.resource_id AND w.task_type = x.task_type
        RETURNING w.resource_id, w.kind, w.kind_version, w.claim_lo)
    SELECT array_agg(resource_id), array_agg(kind), array_agg(kind_version), array_agg(claim_lo)
      INTO v_ids, v_kinds, v_vers, v_los FROM r;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    PERFORM inflight_release(v_kinds, v_vers, v_los);
    PERFORM log_events(v_ids, 'reclaimed', 'lease expired; task re-pended');
    PERFORM notify_gated('work_ready');
    RETURN cardinality(v_ids);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION requeue_lagging(p_lo int, p_hi int, p_window_secs int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    SELECT array_agg(id) INTO v_ids FROM (
        SELECT r.id FROM resources r
         WHERE r.shard_id BETWEEN p_lo AND p_hi
           AND r.synced_gen < r.generation AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
           AND r.updated_at < now() - make_interval(secs => p_window_secs)
           AND NOT (r.failure_gen = r.generation AND r.failure_terminal)
           AND NOT EXISTS (SELECT 1 FROM work_queue w
                            WHERE w.shard_id = r.shard_id AND w.resource_id = r.id
                              AND w.task_type = 'reconcile' AND w.state <> 'done')
         LIMIT p_limit) x;
    IF v_ids IS NULL THEN RETURN 0; END IF;
    RETURN schedule_eligible(v_ids);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION delete_unclaimed_work(p_lo int, p_hi int, p_window_secs int, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    WITH x AS (
        SELECT shard_id, resource_id, task_type FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi
           AND ((state = 'pending' AND claim_epoch = 0) OR state = 'done')
           AND enqueued_at < now() - make_interval(secs => p_window_secs)
         LIMIT p_limit FOR UPDATE SKIP LOCKED)
    DELETE FROM work_queue w USING x
     WHERE w.shard_id BETWEEN p_lo AND p_hi
       AND w.shard_id = x.shard_id AND w.resource_id = x.resource_id AND w.task_type = x.task_type;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION expire_async_tasks(p_task_ids uuid[], p_shards smallint[], p_epochs bigint[], p_message text)
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

ALTER FUNCTION claim_tasks(text, int, int, text[], int, int) RESET plan_cache_mode;
DROP INDEX idx_conditions_false;
CREATE INDEX idx_resources_lagging_child ON resources (owner_id)
    WHERE synced_gen < generation AND failure_gen <> generation AND frozen_until IS NULL AND owner_id IS NOT NULL;
CREATE INDEX idx_resources_lagging ON resources (shard_id, updated_at)
    WHERE synced_gen < generation AND deletion_requested_at IS NULL AND frozen_until IS NULL;
ALTER TABLE resources RESET (fillfactor);
ALTER TABLE resources DROP COLUMN last_task_id, DROP COLUMN last_task_epoch, DROP COLUMN last_claimed_at;

ALTER TABLE work_queue DROP CONSTRAINT work_queue_state_check,
    ADD CONSTRAINT work_queue_state_check CHECK (state IN ('pending','claimed','completed','done')),
    ADD COLUMN completed_epoch bigint NOT NULL DEFAULT 0;
UPDATE work_queue w SET state = 'completed', completed_epoch = w.claim_epoch, lease_until = NULL
  FROM work_outbox o
 WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch AND w.state = 'claimed';
ALTER TABLE work_outbox DROP COLUMN claimed_at;
ALTER TABLE work_outbox DROP CONSTRAINT work_outbox_pkey;
ALTER TABLE work_outbox ADD PRIMARY KEY (shard_id, id);
