-- Namespaces: holding one while a resource is created in it.

-- namespace_hold reports whether the namespace p_ns exists, and holds it
-- until the calling transaction ends: no DeleteNamespace (which takes the
-- same advisory lock exclusively before it counts what the namespace holds)
-- can remove it meanwhile. It stands in for a foreign key from resources:
-- the FOR KEY SHARE a foreign key takes on the one row every creation in
-- default references turned concurrent creations into a MultiXact per
-- creation (8 concurrent applies: about 40% fewer applies per second). A
-- shared advisory lock is one lock-manager entry. VOLATILE, so in READ
-- COMMITTED the existence check takes a snapshot of its own, after the lock
-- is granted: a namespace deleted while the caller waited is seen gone.
CREATE OR REPLACE FUNCTION namespace_hold(p_ns text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('namespace:' || p_ns));
    RETURN EXISTS (SELECT 1 FROM namespaces WHERE name = p_ns);
END
$$;
