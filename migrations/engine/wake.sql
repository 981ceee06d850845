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

-- notify_wake is the trigger of every table whose changes only need to wake
-- the servers that read it: it notifies the channel the trigger names
-- (TG_ARGV[0]), with an empty payload.
CREATE OR REPLACE FUNCTION notify_wake() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], '');
    RETURN NULL;
END
$$;

-- Provider configs: wakes the servers that cache them.
CREATE OR REPLACE TRIGGER providerconfigs_changed AFTER INSERT OR UPDATE OR DELETE ON providerconfigs
    FOR EACH STATEMENT EXECUTE FUNCTION notify_wake('providerconfig_changed');

-- Endpoints: every dispatch pod keeps a live copy of the table; a change wakes
-- them all at once instead of waiting for their failsafe re-read.
CREATE OR REPLACE TRIGGER endpoints_changed AFTER INSERT OR UPDATE OR DELETE ON endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION notify_wake('endpoints_changed');

-- Cluster members: wakes every member to re-tile the shards. A row trigger,
-- not a statement one: a heartbeat is an INSERT ... ON CONFLICT DO UPDATE,
-- which fires INSERT statement triggers even when it only updates the
-- member's row, and every member re-beats on cluster_changed (an idle single
-- server beat ~2,400 times a second). A row trigger fires for rows really
-- inserted or deleted: a join, a leave, a dead member forgotten.
CREATE OR REPLACE TRIGGER cluster_members_changed AFTER INSERT OR DELETE ON cluster_members
    FOR EACH ROW EXECUTE FUNCTION notify_wake('cluster_changed');

-- Reactor bindings: wakes the consoles showing them (the change stream's
-- bindings topic). A statement trigger: a binding is written by an operator,
-- one at a time.
CREATE OR REPLACE TRIGGER reactor_bindings_changed AFTER INSERT OR UPDATE OR DELETE ON reactor_bindings
    FOR EACH STATEMENT EXECUTE FUNCTION notify_wake('reactor_bindings_changed');
