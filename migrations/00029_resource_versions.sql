-- Optimistic concurrency (issue #34): every object a user writes through the
-- API carries a resource_version that changes on each write, so a writer can
-- make its write conditional on the version it read (If-Match, or the
-- version in the body) instead of silently overwriting another's.
--
-- The versions come from one sequence shared by every table: a version is
-- never reused, not even by an object deleted and created again under the
-- same name, so a stale version can never match a newer object. Existing
-- rows get 1 (a constant default adds the column without rewriting the
-- table); the sequence starts above it. The triggers that bump it on an
-- update are the engine's (engine/versions.sql, engine/resources.sql).

-- +goose Up
CREATE SEQUENCE IF NOT EXISTS resource_versions AS bigint START WITH 2;

ALTER TABLE resources ADD COLUMN IF NOT EXISTS resource_version bigint NOT NULL DEFAULT 1;
ALTER TABLE resources ALTER COLUMN resource_version SET DEFAULT nextval('resource_versions');
ALTER TABLE kind_config ADD COLUMN IF NOT EXISTS resource_version bigint NOT NULL DEFAULT 1;
ALTER TABLE kind_config ALTER COLUMN resource_version SET DEFAULT nextval('resource_versions');
ALTER TABLE providerconfigs ADD COLUMN IF NOT EXISTS resource_version bigint NOT NULL DEFAULT 1;
ALTER TABLE providerconfigs ALTER COLUMN resource_version SET DEFAULT nextval('resource_versions');
ALTER TABLE reactor_bindings ADD COLUMN IF NOT EXISTS resource_version bigint NOT NULL DEFAULT 1;
ALTER TABLE reactor_bindings ALTER COLUMN resource_version SET DEFAULT nextval('resource_versions');
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS resource_version bigint NOT NULL DEFAULT 1;
ALTER TABLE endpoints ALTER COLUMN resource_version SET DEFAULT nextval('resource_versions');

-- +goose Down
-- Down forgets the engine's checksums (README.md): the next Up, of this
-- release or of the one before, applies the whole engine again.
DROP TRIGGER IF EXISTS kind_config_version ON kind_config;
DROP TRIGGER IF EXISTS providerconfigs_version ON providerconfigs;
DROP TRIGGER IF EXISTS reactor_bindings_version ON reactor_bindings;
DROP TRIGGER IF EXISTS endpoints_version ON endpoints;
DROP FUNCTION IF EXISTS bump_resource_version();
DROP FUNCTION IF EXISTS require_version(text, bigint, bigint[]);
ALTER TABLE resources DROP COLUMN IF EXISTS resource_version;
ALTER TABLE kind_config DROP COLUMN IF EXISTS resource_version;
ALTER TABLE providerconfigs DROP COLUMN IF EXISTS resource_version;
ALTER TABLE reactor_bindings DROP COLUMN IF EXISTS resource_version;
ALTER TABLE endpoints DROP COLUMN IF EXISTS resource_version;
DROP SEQUENCE IF EXISTS resource_versions;
