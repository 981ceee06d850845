-- Role bindings (issue #39, §2): who may do what, per namespace or
-- cluster-wide (docs/api.md "Roles and role bindings").
--
-- A binding grants one role (viewer < editor < operator < admin, each
-- including the one before) to one user (an OIDC principal's subject) or one
-- group (any of its groups claim), in one namespace or, with namespace NULL,
-- in every namespace and over the cluster-wide objects. Binding names are
-- unique across the plane, as endpoint names are: a name addresses its
-- binding whatever its namespace.
--
-- A namespace's bindings go with it (they are not objects it must be
-- emptied of first). The API reads the whole table into a cache (control/api/rbac.go):
-- bindings are few by nature, so no index beyond the key.

-- +goose Up
CREATE TABLE IF NOT EXISTS role_bindings (
    name        text NOT NULL PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$'),
    role        text NOT NULL CHECK (role IN ('viewer','editor','operator','admin')),
    subject     text CHECK (subject <> ''),     -- the user bound, or NULL
    group_name  text CHECK (group_name <> ''),  -- the group bound, or NULL
    namespace   text REFERENCES namespaces ON DELETE CASCADE, -- NULL = cluster-wide
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT role_bindings_one_principal CHECK ((subject IS NULL) <> (group_name IS NULL))
);

-- +goose Down
DROP TABLE IF EXISTS role_bindings;
