-- A completion locks its resources before their work rows (issue #13), the
-- order every other writer of both takes; the lock reads the phases that
-- apply_items compared with, so apply_items takes them as two more
-- (optional) arguments. CREATE OR REPLACE cannot change a signature: the
-- old one is dropped here, and the engine, applied right after, creates
-- the new one and lock_resources (engine/drain.sql, engine/completion.sql).

-- +goose Up
DROP FUNCTION IF EXISTS apply_items(drain_item[]);

-- +goose Down
-- Down forgets the engine's checksums (README.md): the next Up, of this
-- release or of the one before, applies the whole engine again.
DROP FUNCTION IF EXISTS apply_items(drain_item[], uuid[], text[]);
DROP FUNCTION IF EXISTS lock_resources(uuid[], smallint[], uuid[]);
