-- cluster_changed fires on a change of membership only.
--
-- The trigger was AFTER INSERT OR DELETE FOR EACH STATEMENT. A heartbeat
-- is an INSERT ... ON CONFLICT DO UPDATE, which fires the INSERT statement
-- trigger even when it only updates the member's row; so every beat
-- notified cluster_changed, every member re-beat on the notification, and
-- an idle single server heart-beat ~2,400 times a second instead of once
-- every few seconds (measured: 4,791 beats in 2 s with a 1h interval). A
-- row trigger fires for rows really inserted or deleted: a join, a leave,
-- a dead member forgotten.

-- +goose Up
DROP TRIGGER cluster_members_changed ON cluster_members;
CREATE TRIGGER cluster_members_changed AFTER INSERT OR DELETE ON cluster_members
    FOR EACH ROW EXECUTE FUNCTION cluster_members_changed();

-- +goose Down
DROP TRIGGER cluster_members_changed ON cluster_members;
CREATE TRIGGER cluster_members_changed AFTER INSERT OR DELETE ON cluster_members
    FOR EACH STATEMENT EXECUTE FUNCTION cluster_members_changed();
