-- Name checks without bounded repetition (issue #13). PostgreSQL's regex
-- engine expands {0,251} into as many states, and a CHECK runs on every
-- write of its row, whichever columns change: resources_name_check cost
-- about 8 µs per row, half of the apply's resources UPDATE, on every task.
-- The same language written as an unbounded pattern and a length costs
-- about 0.25 µs. Each constraint keeps its name (the API maps a violation
-- by it) and its meaning: a name of 1 to N characters, alphanumeric at both
-- ends, [A-Za-z0-9._-] between.
--
-- NOT VALID, then VALIDATE: the swap itself holds the ACCESS EXCLUSIVE lock
-- only for the catalogue change, and the scan that validates the rows runs
-- under SHARE UPDATE EXCLUSIVE, beside reads and writes.

-- +goose Up
ALTER TABLE resources DROP CONSTRAINT resources_name_check,
    ADD CONSTRAINT resources_name_check
        CHECK (length(name) <= 253 AND name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$') NOT VALID;
ALTER TABLE resources VALIDATE CONSTRAINT resources_name_check;

ALTER TABLE providerconfigs DROP CONSTRAINT providerconfigs_name_check,
    ADD CONSTRAINT providerconfigs_name_check
        CHECK (length(name) <= 253 AND name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$') NOT VALID;
ALTER TABLE providerconfigs VALIDATE CONSTRAINT providerconfigs_name_check;

ALTER TABLE reactor_bindings DROP CONSTRAINT reactor_bindings_name_check,
    ADD CONSTRAINT reactor_bindings_name_check
        CHECK (length(name) <= 253 AND name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$') NOT VALID;
ALTER TABLE reactor_bindings VALIDATE CONSTRAINT reactor_bindings_name_check;

ALTER TABLE endpoints DROP CONSTRAINT endpoints_name_check,
    ADD CONSTRAINT endpoints_name_check
        CHECK (length(name) <= 63 AND name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$') NOT VALID;
ALTER TABLE endpoints VALIDATE CONSTRAINT endpoints_name_check;

ALTER TABLE kind_manifest DROP CONSTRAINT kind_manifest_kind_check,
    ADD CONSTRAINT kind_manifest_kind_check
        CHECK (length(kind) <= 63 AND kind ~ '^[a-z][a-z0-9-]*$') NOT VALID;
ALTER TABLE kind_manifest VALIDATE CONSTRAINT kind_manifest_kind_check;

-- +goose Down
ALTER TABLE resources DROP CONSTRAINT resources_name_check,
    ADD CONSTRAINT resources_name_check CHECK (name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$');
ALTER TABLE providerconfigs DROP CONSTRAINT providerconfigs_name_check,
    ADD CONSTRAINT providerconfigs_name_check CHECK (name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$');
ALTER TABLE reactor_bindings DROP CONSTRAINT reactor_bindings_name_check,
    ADD CONSTRAINT reactor_bindings_name_check CHECK (name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$');
ALTER TABLE endpoints DROP CONSTRAINT endpoints_name_check,
    ADD CONSTRAINT endpoints_name_check CHECK (name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$');
ALTER TABLE kind_manifest DROP CONSTRAINT kind_manifest_kind_check,
    ADD CONSTRAINT kind_manifest_kind_check CHECK (kind ~ '^[a-z][a-z0-9-]{0,62}$');
