-- Per-endpoint rate limits (issue #39 §4): requests per second and a burst,
-- enforced across every dispatch pod through one shared token bucket per
-- endpoint (docs/operations.md "Rate limits"), optionally adaptive.
--
-- * endpoints.rate_limit is the configured rate (requests per second; NULL =
--   unlimited), endpoints.burst the bucket's size (NULL exactly when there
--   is no rate limit; the API defaults it to ceil(rate_limit)), and
--   endpoints.rate_adaptive lets a 429 or a Lambda throttle lower the rate.
-- * endpoint_rate_buckets is the shared bucket: the tokens it held at
--   refilled_at and, while an adaptive endpoint recovers from a throttle,
--   the rate it was lowered to and when. Pods lease tokens from it in small
--   chunks (rate_lease, engine/rate_limits.sql); waited and throttles are
--   the cluster-wide counts the console shows. It is logged: the counts
--   survive a crash, and a lease is one row update.

-- +goose Up
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS rate_limit double precision
    CONSTRAINT endpoints_rate_limit_range CHECK (rate_limit > 0 AND rate_limit <= 1000000);
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS burst int
    CONSTRAINT endpoints_burst_range CHECK (burst BETWEEN 1 AND 1000000);
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS rate_adaptive boolean NOT NULL DEFAULT false;
ALTER TABLE endpoints DROP CONSTRAINT IF EXISTS endpoints_rate_shape;
ALTER TABLE endpoints ADD CONSTRAINT endpoints_rate_shape
    CHECK ((rate_limit IS NULL) = (burst IS NULL) AND (rate_limit IS NOT NULL OR NOT rate_adaptive));

CREATE TABLE IF NOT EXISTS endpoint_rate_buckets (
    endpoint     text             PRIMARY KEY REFERENCES endpoints (name) ON DELETE CASCADE ON UPDATE CASCADE,
    tokens       double precision NOT NULL,
    refilled_at  timestamptz      NOT NULL,
    lowered_rate double precision,                    -- adaptive: the rate after the last decrease; NULL = at the configured rate
    lowered_at   timestamptz,                         -- when it was lowered
    waited       bigint           NOT NULL DEFAULT 0, -- requests sent after waiting for a token
    throttles    bigint           NOT NULL DEFAULT 0  -- 429s and Lambda throttles reported
);

-- +goose Down
DROP FUNCTION IF EXISTS rate_lease(text, int, bigint);
DROP FUNCTION IF EXISTS rate_throttled(text);
DROP FUNCTION IF EXISTS rate_accrued(double precision, double precision, timestamptz, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS rate_effective(double precision, double precision, timestamptz, timestamptz);
DROP TABLE IF EXISTS endpoint_rate_buckets;
ALTER TABLE endpoints DROP CONSTRAINT IF EXISTS endpoints_rate_shape;
ALTER TABLE endpoints DROP COLUMN IF EXISTS rate_adaptive;
ALTER TABLE endpoints DROP COLUMN IF EXISTS burst;
ALTER TABLE endpoints DROP COLUMN IF EXISTS rate_limit;
