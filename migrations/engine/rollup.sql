-- Rollup: a composite root re-runs its childrenSettled reaction when its
-- children move, once none of them still progresses.

-- schedule_rollup re-runs the rollup of composite roots whose children moved
-- (synced, failed, health flipped), even when the root itself is synced. A root
-- with a child still progressing is armed in rollup_recheck instead: when the
-- last children settle in two concurrent applies, neither snapshot sees "none
-- lagging", and the re-check in a later transaction closes that straddle.
-- It plans without sequential scans, as apply_items does: a plan kept from a
-- small table read every resource per call (11,000 per call in a composite
-- of 10,000 children).
CREATE OR REPLACE FUNCTION schedule_rollup(p_roots uuid[]) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_shards smallint[];
    v_ready uuid[];
    v_kinds text[];
    v_vers smallint[];
    v_gens bigint[];
    v_nss text[];
BEGIN
    IF p_roots IS NULL OR cardinality(p_roots) = 0 THEN RETURN 0; END IF;
    WITH t AS MATERIALIZED (
        SELECT * FROM resources WHERE id = ANY (p_roots)
    ), c AS (
        SELECT r.id, r.shard_id, r.kind, r.kind_version, r.generation, r.namespace, EXISTS (
                SELECT 1 FROM resources ch
                WHERE ch.owner_id = r.id AND ch.synced_gen < ch.generation
                  AND ch.failure_gen <> ch.generation AND ch.frozen_until IS NULL AND ch.deletion_requested_at IS NULL) AS lagging
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
    SELECT array_agg(shard_id) FILTER (WHERE NOT lagging), array_agg(id) FILTER (WHERE NOT lagging),
           array_agg(kind) FILTER (WHERE NOT lagging), array_agg(kind_version) FILTER (WHERE NOT lagging),
           array_agg(generation) FILTER (WHERE NOT lagging), array_agg(namespace) FILTER (WHERE NOT lagging)
      INTO v_shards, v_ready, v_kinds, v_vers, v_gens, v_nss FROM c;
    IF v_ready IS NULL THEN RETURN 0; END IF;
    RETURN enqueue_tasks(v_shards, v_ready, v_kinds, v_vers, v_gens,
                         array_fill('childrenSettled'::text, ARRAY[cardinality(v_ready)]), v_nss);
END
$$;

-- drain_rollup_rechecks re-evaluates armed roots in a fresh snapshot.
CREATE OR REPLACE FUNCTION drain_rollup_rechecks(p_lo int, p_hi int, p_limit int) RETURNS int
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
                  AND ch.failure_gen <> ch.generation AND ch.frozen_until IS NULL AND ch.deletion_requested_at IS NULL))
    SELECT array_agg(id) INTO v_roots FROM c;
    IF v_roots IS NULL THEN RETURN 0; END IF;
    RETURN schedule_rollup(v_roots);
END
$$;
