-- Versions: every write of an object a user owns gives it a new
-- resource_version (from the resource_versions sequence, so a version is
-- never reused), and a write made conditional on the version its writer
-- read is refused when the object has moved on (optimistic concurrency,
-- docs/api.md "Versions and If-Match").
--
-- resources take theirs in resources_before_update (engine/resources.sql),
-- which fires only on the columns a user owns: the engine's status writes
-- leave the version alone. The tables below are written only by the API (and
-- a composer's emitted provider configs, a 410 disabling an endpoint, and a
-- key rotation re-sealing an endpoint's secrets, see below), so any other
-- change of a row is a new version.

CREATE OR REPLACE FUNCTION bump_resource_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.resource_version := nextval('resource_versions');
    RETURN NEW;
END
$$;

-- WHEN: an UPDATE that rewrites a row unchanged (none of the API's do: their
-- upserts skip an equal write) keeps its version.
CREATE OR REPLACE TRIGGER kind_config_version BEFORE UPDATE ON kind_config
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION bump_resource_version();
CREATE OR REPLACE TRIGGER providerconfigs_version BEFORE UPDATE ON providerconfigs
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION bump_resource_version();
CREATE OR REPLACE TRIGGER reactor_bindings_version BEFORE UPDATE ON reactor_bindings
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION bump_resource_version();
-- An endpoint's change of its sealed secrets alone is the re-seal under a
-- rotated CONVERGE_SECRET_KEY (store.ResealSecrets): the same secrets under
-- another key, no write of the user's, so no new version (a rotate-secret
-- also moves prev_secret_expires and updated_at).
CREATE OR REPLACE TRIGGER endpoints_version BEFORE UPDATE ON endpoints
    FOR EACH ROW WHEN (to_jsonb(OLD) - 'secret_enc' - 'prev_secret_enc' IS DISTINCT FROM to_jsonb(NEW) - 'secret_enc' - 'prev_secret_enc')
    EXECUTE FUNCTION bump_resource_version();

-- require_version is a conditional write's precondition: p_current is the
-- object's version, read by the caller with FOR UPDATE in the write's own
-- transaction (NULL: no such object), so nothing can move it before the
-- write. It raises SQLSTATE CV412, DETAIL the current version ('' when the
-- object does not exist), unless the object exists and, when p_expected is
-- not empty, is at one of its versions ('{}' is If-Match: *). The store
-- turns CV412 into a PreconditionError.
CREATE OR REPLACE FUNCTION require_version(p_what text, p_current bigint, p_expected bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_current IS NULL THEN
        RAISE EXCEPTION '% does not exist', p_what USING ERRCODE = 'CV412', DETAIL = '';
    END IF;
    IF cardinality(p_expected) > 0 AND p_current <> ALL (p_expected) THEN
        RAISE EXCEPTION '% is at resource_version %', p_what, p_current
            USING ERRCODE = 'CV412', DETAIL = p_current::text;
    END IF;
END
$$;
