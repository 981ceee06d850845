-- The drain: apply task outcomes from work_outbox to resources. Results never
-- write resources directly; they land here, and this is the one writer.

-- +goose Up

-- substitute_values copies value flows from the given upstreams' status into
-- their dependents' specs (a spec change bumps generation, so the dependent
-- re-runs) and schedules the dependents it changed.
-- +goose StatementBegin
CREATE FUNCTION substitute_values(p_upstreams uuid[]) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_changed uuid[];
BEGIN
    IF p_upstreams IS NULL THEN RETURN 0; END IF;
    WITH flows AS (
        SELECT d.dependent_id,
               jsonb_agg(jsonb_build_object('p', f->>'dependent_field', 'v', u.status #> pointer_path(f->>'source_field'))) AS fl
          FROM resource_deps d
          JOIN resources u ON u.id = d.dependency_id
          CROSS JOIN LATERAL jsonb_array_elements(d.value_flows) f
         WHERE d.dependency_id = ANY (p_upstreams)
           AND d.value_flows <> '[]'
           AND u.status IS NOT NULL
           AND u.status #> pointer_path(f->>'source_field') IS NOT NULL
         GROUP BY d.dependent_id
    ), up AS (
        UPDATE resources r SET spec = apply_flows(r.spec, flows.fl)
          FROM flows
         WHERE r.id = flows.dependent_id
           AND r.frozen_until IS NULL AND r.deletion_requested_at IS NULL
           AND r.spec IS DISTINCT FROM apply_flows(r.spec, flows.fl)
        RETURNING r.id
    )
    SELECT array_agg(id) INTO v_changed FROM up;
    IF v_changed IS NULL THEN RETURN 0; END IF;
    PERFORM log_events(v_changed, 'value_substituted', 'spec updated from an upstream status');
    PERFORM schedule_eligible(v_changed);
    RETURN cardinality(v_changed);
END
$$;
-- +goose StatementEnd

-- apply_compose applies a composer's outcome for p_root: children, edges and
-- provider configs are diffed against what the root owns — the changed are
-- upserted, the vanished pruned (or orphaned for a grace window when the child's
-- kind sets orphan_grace_secs). Bootstrap value flows are folded into each
-- child's spec before it is written, so a recompose does not churn
-- generations. Any inconsistency raises; the drain turns that into a terminal
-- failure of the composer.
-- +goose StatementBegin
CREATE FUNCTION apply_compose(p_root uuid, p_outcome jsonb, p_emits int) RETURNS void
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

-- drain_item is one outcome after its work row was finalized.
CREATE TYPE drain_item AS (
    resource_id uuid, task_id uuid, trigger text, generation bigint, emits int, outcome jsonb,
    error text, terminal boolean, rerun boolean, rollup_dirty boolean, has_rollup boolean);

-- drain_outbox_batch pops up to p_limit outcomes in [p_lo, p_hi] and applies
-- them: composition first (its failure becomes a terminal failure), then the
-- work rows (retry with jittered exponential backoff, or done; a transient
-- failure past max_transient_attempts turns terminal), then one coalesced
-- resources UPDATE (status, spec_gen/synced_gen, health_ok, failure_gen — only
-- the parts the reaction's emits mask allows), conditions on transition with
-- stale False rows cleared on recovery, events, value flows, re-scheduling.
-- +goose StatementBegin
CREATE FUNCTION drain_outbox_batch(p_lo int, p_hi int, p_limit int, p_retry_base_ms int, p_retry_max_ms int)
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

-- +goose Down
DROP FUNCTION IF EXISTS drain_outbox_batch, apply_compose, substitute_values;
DROP TYPE IF EXISTS drain_item;
