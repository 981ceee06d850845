-- The checksum of every applied migration, recorded when it is applied and
-- checked before every Up: a merged migration edited afterwards (its change
-- never reaches databases that already ran it) stops the boot with the file
-- named, instead of running new code against an old schema.

-- +goose Up
CREATE TABLE converge_migration_checksums (
    version     bigint      PRIMARY KEY,
    file        text        NOT NULL,
    sha256      text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE converge_migration_checksums;
