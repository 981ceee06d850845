-- The claim returns what a request needs (issue #41 §3): claim_tasks
-- returns, with each claimed work task, its resource's columns as the
-- request reads them, so RequestBuild does not read the resources again.
-- Its return type changes, so the old function is dropped here and the
-- engine creates the new one.

-- +goose Up
DROP FUNCTION IF EXISTS claim_tasks(text, int, int, text[], text[], int, int);

-- +goose Down
-- The new claim goes too, so the engine of the release before can create
-- its own; Down forgets the engine's checksums (README.md), and the next Up
-- applies the whole engine again.
DROP FUNCTION IF EXISTS claim_tasks(text, int, int, text[], text[], int, int);
