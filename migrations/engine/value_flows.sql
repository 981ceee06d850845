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

-- substitute_values copies value flows from the given upstreams' status into
-- their dependents' specs (a spec change bumps generation, so the dependent
-- re-runs) and schedules the dependents it changed.
CREATE OR REPLACE FUNCTION substitute_values(p_upstreams uuid[]) RETURNS int
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
