-- providerconfigs_changed, endpoints_changed and cluster_members_changed were
-- one trigger function written three times, each notifying its own channel.
-- The engine now has one, notify_wake, to which each trigger passes its
-- channel (migrations/engine/wake.sql). Removing a function is a numbered
-- migration's job: the three go with their triggers, and the engine, applied
-- right after in the same run, attaches the triggers again to notify_wake.

-- +goose Up
DROP TRIGGER IF EXISTS providerconfigs_changed ON providerconfigs;
DROP TRIGGER IF EXISTS endpoints_changed ON endpoints;
DROP TRIGGER IF EXISTS cluster_members_changed ON cluster_members;
DROP FUNCTION IF EXISTS providerconfigs_changed(), endpoints_changed(), cluster_members_changed();

-- +goose Down
-- The triggers go with notify_wake. A Down makes the next Up re-apply every
-- engine file, so the engine of whichever release runs next attaches them
-- again to the functions it defines.
DROP FUNCTION IF EXISTS notify_wake() CASCADE;
