-- Wakes: LISTEN/NOTIFY hints. A wake is a coalesced latency hint, never a
-- source of truth: every listener also re-reads on a timer, and a payload is
-- empty (re-read, never the data).

-- notify_gated fires at most one pg_notify per channel per 10 ms window across
-- all backends, without blocking any caller: an unlocked read turns away almost
-- every caller, a non-blocking advisory lock picks one winner per window.
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

-- providerconfigs_changed wakes the servers that cache provider configs.
CREATE OR REPLACE FUNCTION providerconfigs_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('providerconfig_changed', '');
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER providerconfigs_changed AFTER INSERT OR UPDATE OR DELETE ON providerconfigs
    FOR EACH STATEMENT EXECUTE FUNCTION providerconfigs_changed();

-- Every dispatch pod keeps a live copy of the endpoints table; a change wakes
-- them all at once instead of waiting for their failsafe re-read. The payload
-- is empty: a wake is a hint to re-read, never the data.
CREATE OR REPLACE FUNCTION endpoints_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('endpoints_changed', '');
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER endpoints_changed AFTER INSERT OR UPDATE OR DELETE ON endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION endpoints_changed();
