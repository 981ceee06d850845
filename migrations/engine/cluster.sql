-- Cluster membership: each member's shard range. (The wake on a join or a
-- leave is a notify_wake trigger, in wake.sql.)

-- assign_member_shards ranks a member among the live members of its role and
-- tiles [0, p_total) into contiguous ranges by (rank, count); it returns the
-- member's range as [lo, hi], or NULLs if the member is not live.
CREATE OR REPLACE FUNCTION assign_member_shards(p_member text, p_total int, p_liveness_secs int, OUT lo int, OUT hi int)
LANGUAGE plpgsql AS $$
DECLARE
    v_rank int;
    v_count int;
BEGIN
    WITH live AS (
        SELECT m.member_id, row_number() OVER (ORDER BY m.member_id) - 1 AS rnk
          FROM cluster_members m
         WHERE m.role = (SELECT role FROM cluster_members WHERE member_id = p_member)
           AND m.last_heartbeat > now() - make_interval(secs => p_liveness_secs))
    SELECT (SELECT rnk FROM live WHERE member_id = p_member), (SELECT count(*) FROM live)
      INTO v_rank, v_count;
    IF v_rank IS NULL THEN RETURN; END IF;
    lo := (v_rank * p_total) / v_count;
    hi := ((v_rank + 1) * p_total) / v_count - 1;
END
$$;
