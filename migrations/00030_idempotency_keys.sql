-- Idempotency keys (issue #34): a POST sent with an Idempotency-Key runs
-- once; a retry of it within the retention window gets the first answer
-- (docs/api.md "Idempotency keys"). One row per (caller, key): the request
-- that took the key (its fingerprint, and while it runs its owner and the
-- lease past which it is presumed dead), then the answer it gave. LOGGED:
-- a key must outlive a crash of the database, or a retry after one would
-- run again. The reaper deletes the rows past expires_at.

-- +goose Up
CREATE TABLE IF NOT EXISTS idempotency_keys (
    caller      bytea       NOT NULL, -- sha256 of the caller's bearer token; empty on an open API
    key         text        NOT NULL,
    request     bytea       NOT NULL, -- sha256 of the request's method, path, query and body
    owner       uuid,                 -- the running request's id; NULL once it answered
    lease_until timestamptz NOT NULL, -- a running request that has not answered by then never will
    status      smallint,
    headers     jsonb,
    body        bytea,
    sealed      boolean     NOT NULL DEFAULT false, -- body is encrypted with CONVERGE_SECRET_KEY (it may hold a signing secret)
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (caller, key),
    CHECK ((owner IS NULL) = (status IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS idx_idempotency_keys_expires ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE IF EXISTS idempotency_keys;
