-- Alerts: the state changes an operator pages on (alert_events) and their
-- delivery to the sinks that select them (alert_outbox), written together so
-- an alert is never lost nor invented: a change that commits has its rows,
-- one that rolls back has none. The sink deliverer (package alerts) claims
-- the outbox rows.

-- emit_alert logs one alert event and queues it for every enabled sink that
-- selects its type (and its kind and endpoint, when the sink names any). It
-- returns the event's id, the dedup id every sink carries.
CREATE OR REPLACE FUNCTION emit_alert(p_type text, p_endpoint text, p_kind text, p_kind_version int,
                                      p_resource_id uuid, p_resource_name text, p_source text, p_message text) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    INSERT INTO alert_events (type, endpoint, kind, kind_version, resource_id, resource_name, source, message)
    VALUES (p_type, coalesce(p_endpoint, ''), coalesce(p_kind, ''), coalesce(p_kind_version, 0), p_resource_id,
            coalesce(p_resource_name, ''), coalesce(p_source, ''), coalesce(p_message, ''))
    RETURNING id INTO v_id;
    INSERT INTO alert_outbox (event_id, sink_name)
    SELECT v_id, s.name FROM alert_sinks s
     WHERE s.enabled AND p_type = ANY (s.event_types)
       AND (cardinality(s.kinds) = 0 OR coalesce(p_kind, '') = ANY (s.kinds))
       AND (cardinality(s.endpoints) = 0 OR coalesce(p_endpoint, '') = ANY (s.endpoints));
    RETURN v_id;
END
$$;

-- emit_resource_failed_alerts logs resource.failed for the resources p_ids
-- (those that just failed terminally: a terminal error, or their transient
-- retries exhausted). The hot path pays one probe of a tiny table when no
-- sink selects the type: without a subscriber the event is not logged.
CREATE OR REPLACE FUNCTION emit_resource_failed_alerts(p_ids uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_ids IS NULL OR NOT EXISTS (SELECT 1 FROM alert_sinks WHERE enabled AND 'resource.failed' = ANY (event_types)) THEN
        RETURN;
    END IF;
    PERFORM emit_alert('resource.failed', '', r.kind, r.kind_version, r.id, r.name, '', coalesce(r.last_error, ''))
       FROM resources r WHERE r.id = ANY (p_ids);
END
$$;
