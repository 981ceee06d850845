-- Composition: a composer's outcome (children, edges, provider configs)
-- applied to the resources its root owns.

-- apply_compose applies a composer's outcome for p_root: children, edges and
-- provider configs, all in the root's namespace (a child, an edge's ends and
-- a value flow's source are looked up there and nowhere else), are diffed
-- against what the root owns — the changed are
-- upserted, the vanished pruned through the teardown protocol (or orphaned
-- for a grace window when the child's kind sets orphan_grace_secs).
-- Bootstrap value flows are folded into each child's spec before it is
-- written, so a recompose does not churn generations; only an outcome with
-- value flows pays for that lookup. A flowed field the outcome's snapshot
-- cannot see yet is kept (keep_flowed). A child the outcome created takes
-- one plain queue insert unless an edge holds it back. Any inconsistency
-- raises; the drain turns that into a terminal failure of the composer (a
-- deadlock excepted: the drain runs again). It plans without sequential
-- scans (the scratch table compose_edges, which has no index, is still
-- scanned): a plan made while resources was small read every resource to
-- find the root's children, each recompose of a 10,000-child composite. And
-- without JIT, which that setting's cost of 1e10 on the compose_edges scans
-- set off at every call (migrations/README.md).
CREATE OR REPLACE FUNCTION apply_compose(p_root uuid, p_outcome jsonb, p_emits int) RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_bad text;
    v_ids uuid[];
    v_pruned uuid[];
    v_orphans int := 0;
    v_new int := 0;
    v_flows boolean := jsonb_path_exists(p_outcome, '$.edges[*].values[*]');
    v_new_ids uuid[];
    v_new_shards smallint[];
    v_new_kinds text[];
    v_new_vers smallint[];
    v_queued uuid[];
    v_edge_ups uuid[];
    v_ns text;
BEGIN
    -- A root being torn down composes nothing more: its children are
    -- already marked, and re-creating one would race the teardown.
    SELECT namespace INTO v_ns FROM resources WHERE id = p_root AND deletion_requested_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN RETURN; END IF;

    IF p_emits & 4 <> 0 AND jsonb_typeof(p_outcome->'configs') = 'array' THEN
        SELECT c->>'name' INTO v_bad
          FROM jsonb_array_elements(p_outcome->'configs') c
          JOIN providerconfigs pc ON pc.name = c->>'name'
         WHERE pc.owner_id IS DISTINCT FROM p_root LIMIT 1;
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'provider config % already exists and is not owned by this resource', v_bad;
        END IF;
        INSERT INTO providerconfigs AS pc (name, kind, kind_version, is_default, spec, data, owner_id, namespace)
        SELECT c->>'name', c->>'kind', (c->>'kind_version')::smallint, coalesce((c->>'is_default')::boolean, false),
               coalesce(c->'spec', '{}'), decode(c->>'data', 'base64'), p_root, v_ns
          FROM jsonb_array_elements(p_outcome->'configs') c
        ON CONFLICT (name) DO UPDATE SET
            kind = EXCLUDED.kind, kind_version = EXCLUDED.kind_version, is_default = EXCLUDED.is_default,
            spec = EXCLUDED.spec, data = EXCLUDED.data, updated_at = now()
        WHERE (pc.kind, pc.kind_version, pc.is_default, pc.spec, pc.data)
              IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.kind_version, EXCLUDED.is_default, EXCLUDED.spec, EXCLUDED.data);
    END IF;

    IF p_emits & 1 <> 0 AND jsonb_typeof(p_outcome->'children') = 'array' THEN
        -- One key probe per child (LIMIT 1 keeps the subquery from being
        -- flattened into a join): the join's kept plan hashed the children
        -- against a full index scan of resources, every resource read on
        -- each compose.
        SELECT format('%s/%s', c->>'kind', c->>'name') INTO v_bad
          FROM jsonb_array_elements(p_outcome->'children') c
          CROSS JOIN LATERAL (SELECT r.owner_id FROM resources r
                               WHERE r.namespace = v_ns AND r.kind = c->>'kind' AND r.name = c->>'name' LIMIT 1) r
         WHERE r.owner_id IS DISTINCT FROM p_root LIMIT 1;
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'child % already exists and is not owned by this resource', v_bad;
        END IF;
        WITH desired AS (
            SELECT c->>'kind' AS kind, (c->>'kind_version')::smallint AS kind_version, c->>'name' AS name,
                   coalesce(c->'labels', '{}') AS labels, coalesce(c->'spec', '{}') AS spec
              FROM jsonb_array_elements(p_outcome->'children') c
        ), flows AS (
            -- The outcome's value flows whose source already has a value,
            -- grouped by dependent: one pass over the edges, joined to the
            -- children by key. (Looking the edges up per child was
            -- quadratic: the classic demo's large BOM, 5,447 children and
            -- about as many edges, spent most of its compose there.) Only an
            -- outcome with value flows pays for it.
            -- Each source is looked up by its key (LATERAL): a plain join
            -- let the planner, which guesses 100 rows for a jsonb array,
            -- scan the edges once per resource.
            SELECT x.kind, x.name, jsonb_agg(jsonb_build_object('p', x.field, 'v', u.status #> pointer_path(x.source))) AS fl
              FROM (SELECT e->'dependent'->>'kind' AS kind, e->'dependent'->>'name' AS name,
                           e->'dependency'->>'kind' AS ukind, e->'dependency'->>'name' AS uname,
                           f->>'dependent_field' AS field, f->>'source_field' AS source
                      FROM jsonb_array_elements(coalesce(p_outcome->'edges', '[]')) e
                      CROSS JOIN LATERAL jsonb_array_elements(coalesce(e->'values', '[]')) f
                     WHERE v_flows) x
              CROSS JOIN LATERAL (SELECT r.status FROM resources r
                                   WHERE r.namespace = v_ns AND r.kind = x.ukind AND r.name = x.uname) u
             WHERE u.status #> pointer_path(x.source) IS NOT NULL
             GROUP BY 1, 2
        ), flowed AS (
            SELECT d.*, apply_flows(d.spec, fl.fl) AS fspec
              FROM desired d LEFT JOIN flows fl ON fl.kind = d.kind AND fl.name = d.name
        ), up AS (
            INSERT INTO resources AS r (namespace, kind, kind_version, name, labels, spec, owner_id)
            SELECT v_ns, kind, kind_version, name, labels, fspec, p_root FROM flowed
            ON CONFLICT (namespace, kind, name) DO UPDATE SET
                kind_version = EXCLUDED.kind_version,
                labels = EXCLUDED.labels,
                spec = CASE WHEN EXCLUDED.spec <> r.spec
                            THEN keep_flowed(EXCLUDED.spec, r.spec,
                                             (SELECT array_agg(f->>'dependent_field') FROM resource_deps d, jsonb_array_elements(d.value_flows) f
                                               WHERE d.dependent_id = r.id AND d.value_flows <> '[]'))
                            ELSE EXCLUDED.spec END,
                frozen_until = CASE WHEN r.frozen_until = 'infinity' THEN r.frozen_until END
            WHERE r.owner_id = p_root AND r.deletion_requested_at IS NULL
              AND (r.kind_version, r.labels, r.spec, r.frozen_until IS NOT NULL AND r.frozen_until <> 'infinity')
                  IS DISTINCT FROM (EXCLUDED.kind_version, EXCLUDED.labels, EXCLUDED.spec, false)
            RETURNING r.id, r.shard_id, r.kind, r.kind_version, (r.generation = 1 AND r.synced_gen = 0 AND r.xmax = 0) AS inserted
        )
        SELECT array_agg(id), count(*) FILTER (WHERE inserted), array_agg(id) FILTER (WHERE inserted),
               array_agg(shard_id) FILTER (WHERE inserted), array_agg(kind) FILTER (WHERE inserted),
               array_agg(kind_version) FILTER (WHERE inserted)
          INTO v_ids, v_new, v_new_ids, v_new_shards, v_new_kinds, v_new_vers FROM up;

        -- Prune what the composer no longer emits: into orphan grace when
        -- its kind has one, else through the teardown protocol (its
        -- finalizer runs first; teardown.sql). A child already being torn
        -- down is left to it. NOT IN makes the outcome's keys one hashed
        -- subplan: a NOT EXISTS over the array was planned as a nested loop
        -- (the planner guesses 100 elements and one owned child), quadratic
        -- in the children: most of the large BOM's compose drain.
        WITH gone AS (
            SELECT r.id, coalesce(kc.orphan_grace_secs, 0) AS grace
              FROM resources r
              LEFT JOIN kind_config kc ON kc.kind = r.kind AND kc.kind_version = r.kind_version
             WHERE r.owner_id = p_root AND r.deletion_requested_at IS NULL
               AND (r.kind, r.name) NOT IN (SELECT c->>'kind', c->>'name'
                                              FROM jsonb_array_elements(p_outcome->'children') c)
        ), orphaned AS (
            UPDATE resources r SET frozen_until = now() + make_interval(secs => g.grace)
              FROM gone g WHERE r.id = g.id AND g.grace > 0 AND r.frozen_until IS NULL
            RETURNING r.id
        )
        SELECT array_agg(g.id) FILTER (WHERE g.grace = 0), (SELECT count(*) FROM orphaned)
          INTO v_pruned, v_orphans FROM gone g;
        PERFORM request_deletion(v_pruned, 'pruned: its composer no longer emits it');
        IF v_ids IS NOT NULL OR v_pruned IS NOT NULL OR v_orphans > 0 THEN
            INSERT INTO resource_events (resource_id, type, generation, message)
            SELECT p_root, 'composed', r.generation,
                   format('%s children upserted (%s new), %s pruned, %s orphaned', coalesce(cardinality(v_ids), 0), v_new,
                          coalesce(cardinality(v_pruned), 0), v_orphans)
              FROM resources r WHERE r.id = p_root;
        END IF;
    END IF;

    IF p_emits & 2 <> 0 AND jsonb_typeof(p_outcome->'edges') = 'array' THEN
        CREATE TEMP TABLE IF NOT EXISTS compose_edges (dependent_id uuid, dependency_id uuid, value_flows jsonb) ON COMMIT DELETE ROWS;
        TRUNCATE compose_edges;
        INSERT INTO compose_edges
        SELECT dep.id, up.id, coalesce(e->'values', '[]')
          FROM jsonb_array_elements(p_outcome->'edges') e
          LEFT JOIN resources dep ON dep.namespace = v_ns AND dep.kind = e->'dependent'->>'kind' AND dep.name = e->'dependent'->>'name'
          LEFT JOIN resources up ON up.namespace = v_ns AND up.kind = e->'dependency'->>'kind' AND up.name = e->'dependency'->>'name';
        SELECT 'an edge names a resource that does not exist' INTO v_bad
          FROM compose_edges WHERE dependent_id IS NULL OR dependency_id IS NULL LIMIT 1;
        IF v_bad IS NOT NULL THEN RAISE EXCEPTION '%', v_bad; END IF;
        -- An edge of a child being torn down stays until the child is gone
        -- (the foreign keys remove it then): it is what orders that
        -- teardown, dependents first, and the composer that pruned the
        -- child no longer emits it.
        DELETE FROM resource_deps d
         WHERE d.owner_id = p_root
           AND NOT EXISTS (SELECT 1 FROM compose_edges c WHERE c.dependent_id = d.dependent_id AND c.dependency_id = d.dependency_id)
           AND NOT EXISTS (SELECT 1 FROM resources x
                            WHERE x.id IN (d.dependent_id, d.dependency_id) AND x.deletion_requested_at IS NOT NULL);
        WITH ne AS (
            INSERT INTO resource_deps AS d (dependent_id, dependency_id, owner_id, value_flows)
            SELECT DISTINCT ON (dependent_id, dependency_id) dependent_id, dependency_id, p_root, value_flows FROM compose_edges
            ON CONFLICT (dependent_id, dependency_id) DO UPDATE SET value_flows = EXCLUDED.value_flows, owner_id = p_root
            WHERE (d.value_flows, d.owner_id) IS DISTINCT FROM (EXCLUDED.value_flows, p_root)
            RETURNING d.dependency_id)
        SELECT array_agg(DISTINCT dependency_id) INTO v_edge_ups
          FROM ne WHERE dependency_id NOT IN (SELECT unnest(v_new_ids));

        -- An upstream of a new edge may be finishing its task right now. Its
        -- completion cannot see this uncommitted edge, and this compose's
        -- snapshot cannot see its new status: the dependent would then be
        -- scheduled without the value, or not at all. So the upstreams are
        -- locked (FOR SHARE, in key order) before their flows are applied
        -- again (substitute_values, a statement of its own, so it reads
        -- what committed while the lock waited): a completion that updated
        -- one first is waited for and its status used here; one that comes
        -- second waits for this transaction, and its flow and cascade then
        -- see the edge (apply_items reads the edges after its resources
        -- UPDATE). A child this outcome created cannot be finishing a task,
        -- so it is not locked.
        IF v_edge_ups IS NOT NULL THEN
            PERFORM 1 FROM resources r WHERE r.id = ANY (v_edge_ups) ORDER BY r.id FOR SHARE;
            PERFORM substitute_values(v_edge_ups);
        END IF;
    END IF;

    IF p_emits & 4 <> 0 AND jsonb_typeof(p_outcome->'configs') = 'array' THEN
        DELETE FROM providerconfigs pc
         WHERE pc.owner_id = p_root
           AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_outcome->'configs') c WHERE c->>'name' = pc.name);
    END IF;

    IF v_new_ids IS NOT NULL THEN
        -- A child this outcome created is a 'created' lifecycle edge.
        PERFORM emit_lifecycle(v_new_ids, 'created');
        -- A child this outcome created has no task yet: unless an edge holds
        -- it back, it takes one plain queue insert, as an API create does
        -- (schedule_applied), not the gate: its checks find nothing on a
        -- child with no task and no edge holding it, and a large compose
        -- would pay for them per child.
        WITH q AS (
            INSERT INTO work_queue (shard_id, resource_id, task_type, kind, kind_version, generation, trigger, namespace)
            SELECT n.shard_id, n.id, 'reconcile', n.kind, n.kind_version, 1, 'specChange', v_ns
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
