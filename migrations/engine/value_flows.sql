-- Value flows: JSON-pointer fields copied from a dependency's status into its
-- dependents' specs (resource_deps.value_flows).

-- pointer_path turns an RFC 6901 JSON pointer into a jsonb path array.
CREATE OR REPLACE FUNCTION pointer_path(p text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p = '' THEN '{}'::text[] ELSE
        array(SELECT replace(replace(t, '~1', '/'), '~0', '~')
              FROM unnest(string_to_array(substr(p, 2), '/')) WITH ORDINALITY AS s(t, i) ORDER BY i)
    END
$$;

-- apply_flows sets each {p: pointer, v: value} of flows into doc.
CREATE OR REPLACE FUNCTION apply_flows(doc jsonb, flows jsonb) RETURNS jsonb
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

-- keep_flowed is a composer's new spec for an existing child: each field in
-- p_ptrs (the JSON pointers the child's edges flow into) that the new spec
-- lacks and the stored spec has is kept. apply_compose folds the flows it
-- can see into the new spec, but an upstream finishing at the same moment
-- may have flowed a value the compose's snapshot does not show: the
-- compose's upsert waits for that row and must not write the value away.
-- (No query inside: a FOR over a query opens a cursor at every call, which
-- cost more than the function's work.)
CREATE OR REPLACE FUNCTION keep_flowed(p_new jsonb, p_old jsonb, p_ptrs text[]) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_ptr text;
    v_path text[];
BEGIN
    FOREACH v_ptr IN ARRAY coalesce(p_ptrs, '{}') LOOP
        v_path := pointer_path(v_ptr);
        IF p_new #> v_path IS NULL AND p_old #> v_path IS NOT NULL THEN
            p_new := jsonb_set(coalesce(p_new, '{}'), v_path, p_old #> v_path, true);
        END IF;
    END LOOP;
    RETURN p_new;
END
$$;

-- substitute_values copies value flows from the given upstreams' status into
-- their dependents' specs (a spec change bumps generation, so the dependent
-- re-runs) and schedules the dependents it changed. Every resources lookup
-- is keyed (id = ANY): joined in one statement, the planner hashed a scan of
-- the whole table twice per call, in most of the large classic BOM's drains,
-- growing with the table.
CREATE OR REPLACE FUNCTION substitute_values(p_upstreams uuid[]) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_deps uuid[];
    v_flows jsonb[];
    v_changed uuid[];
BEGIN
    IF p_upstreams IS NULL THEN RETURN 0; END IF;
    WITH u AS MATERIALIZED (
        SELECT id, status FROM resources WHERE id = ANY (p_upstreams) AND status IS NOT NULL
    )
    SELECT array_agg(dependent_id), array_agg(fl) INTO v_deps, v_flows
      FROM (SELECT d.dependent_id,
                   jsonb_agg(jsonb_build_object('p', f->>'dependent_field', 'v', u.status #> pointer_path(f->>'source_field'))) AS fl
              FROM u
              JOIN resource_deps d ON d.dependency_id = u.id
              CROSS JOIN LATERAL jsonb_array_elements(d.value_flows) f
             WHERE d.value_flows <> '[]'
               AND u.status #> pointer_path(f->>'source_field') IS NOT NULL
             GROUP BY d.dependent_id) x;
    IF v_deps IS NULL THEN RETURN 0; END IF;
    -- Driven by the array, one primary-key probe per dependent (adding
    -- id = ANY to a probe would scan the whole array on every probe). The
    -- new spec is computed in the UPDATE from the row it writes: when two
    -- upstreams of one dependent finish at once, the second waits for the
    -- first's row and re-evaluates on the version the first committed, so
    -- both flows land. (Computed from a snapshot read before the UPDATE,
    -- the second writer put back the spec the first had replaced: a route
    -- lost its tgw_id to its vpc's flow and ran without it.)
    WITH up AS (
        UPDATE resources r SET spec = apply_flows(r.spec, x.fl)
          FROM unnest(v_deps, v_flows) AS x(id, fl)
         WHERE r.id = x.id AND r.frozen_until IS NULL AND r.deletion_requested_at IS NULL
           AND r.spec IS DISTINCT FROM apply_flows(r.spec, x.fl)
        RETURNING r.id
    )
    SELECT array_agg(id) INTO v_changed FROM up;
    IF v_changed IS NULL THEN RETURN 0; END IF;
    PERFORM log_events(v_changed, 'value_substituted', 'spec updated from an upstream status');
    PERFORM schedule_eligible(v_changed);
    RETURN cardinality(v_changed);
END
$$;
