-- Rate limits: one shared token bucket per rate-limited endpoint
-- (endpoint_rate_buckets, migration 00037), leased by the dispatch pods in
-- small chunks, and the adaptive rate a provider's throttles lower
-- (docs/operations.md "Rate limits").
--
-- The adaptive rule. An endpoint configured at rate r (rate_limit) runs at
-- its effective rate e(t). A throttle (a 429, or a Lambda throttle) at t0
-- sets the lowered rate L = max(e(t0) / 2, r / 32) unless the rate was
-- already lowered within the last second (one decrease per second: the
-- answers to requests sent before a decrease do not halve it again); it
-- also empties the bucket. From then on, without another throttle,
--     e(t) = min(r, L + r * (t - t0) / 60 s):
-- the rate climbs back linearly by r/60 per second, so it is back at r
-- within 60 s of the last throttle. The bucket's size follows the rate:
-- max(1, burst * e(t) / r). Without a throttle, e(t) = r.

-- rate_effective is e(t) for an endpoint at configured rate p_rate, lowered
-- to p_lowered at p_lowered_at (NULL: never lowered, or recovered).
CREATE OR REPLACE FUNCTION rate_effective(p_rate double precision, p_lowered double precision, p_lowered_at timestamptz, p_at timestamptz)
RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_lowered IS NULL THEN p_rate
                ELSE least(p_rate, p_lowered + p_rate * greatest(extract(epoch FROM p_at - p_lowered_at), 0) / 60) END
$$;

-- rate_accrued is the tokens the bucket gains from p_from to p_to: the
-- integral of e(t) over it (a trapezoid while the rate climbs, a rectangle
-- once it is back at p_rate).
CREATE OR REPLACE FUNCTION rate_accrued(p_rate double precision, p_lowered double precision, p_lowered_at timestamptz,
                                        p_from timestamptz, p_to timestamptz)
RETURNS double precision
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_full timestamptz; -- when the rate is back at p_rate
    v_mid  timestamptz;
    v_acc  double precision;
BEGIN
    IF p_to <= p_from THEN
        RETURN 0;
    END IF;
    IF p_lowered IS NULL THEN
        RETURN p_rate * extract(epoch FROM p_to - p_from);
    END IF;
    v_full := p_lowered_at + make_interval(secs => greatest(p_rate - p_lowered, 0) / p_rate * 60);
    IF p_from >= v_full THEN
        RETURN p_rate * extract(epoch FROM p_to - p_from);
    END IF;
    v_mid := least(p_to, v_full);
    v_acc := (rate_effective(p_rate, p_lowered, p_lowered_at, p_from) + rate_effective(p_rate, p_lowered, p_lowered_at, v_mid)) / 2
             * extract(epoch FROM v_mid - p_from);
    IF p_to > v_full THEN
        v_acc := v_acc + p_rate * extract(epoch FROM p_to - v_full);
    END IF;
    RETURN v_acc;
END
$$;

-- rate_lease takes up to p_want tokens from endpoint p_endpoint's bucket,
-- first refilling it for the time since its last refill, and adds
-- p_waited (requests the caller sent after waiting for a token since its
-- last lease) to the bucket's waited count. It returns the tokens granted,
-- the effective rate, and how long until the bucket holds
-- min(p_want, its size) again (0 when it does now). An endpoint without a
-- rate limit (or gone) grants p_want with a NULL rate. The bucket row is
-- created full on first use; its row lock serializes the pods' leases.
CREATE OR REPLACE FUNCTION rate_lease(p_endpoint text, p_want int, p_waited bigint)
RETURNS TABLE (granted int, effective double precision, wait_secs double precision)
LANGUAGE plpgsql AS $$
DECLARE
    v_rate  double precision;
    v_burst int;
    b       endpoint_rate_buckets%ROWTYPE;
    v_now   timestamptz;
    v_eff   double precision;
    v_size  double precision;
    v_tok   double precision;
    v_got   int;
BEGIN
    SELECT e.rate_limit, e.burst INTO v_rate, v_burst FROM endpoints e WHERE e.name = p_endpoint;
    IF v_rate IS NULL THEN
        RETURN QUERY SELECT p_want, NULL::double precision, 0::double precision;
        RETURN;
    END IF;
    INSERT INTO endpoint_rate_buckets (endpoint, tokens, refilled_at) VALUES (p_endpoint, v_burst, clock_timestamp())
        ON CONFLICT (endpoint) DO NOTHING;
    SELECT * INTO b FROM endpoint_rate_buckets WHERE endpoint = p_endpoint FOR UPDATE;
    v_now := clock_timestamp();
    v_eff := rate_effective(v_rate, b.lowered_rate, b.lowered_at, v_now);
    v_size := greatest(1, v_burst * v_eff / v_rate);
    v_tok := least(v_size, b.tokens + rate_accrued(v_rate, b.lowered_rate, b.lowered_at, b.refilled_at, v_now));
    v_got := least(p_want, floor(v_tok))::int;
    v_tok := v_tok - v_got;
    IF v_eff >= v_rate THEN -- recovered: forget the decrease
        b.lowered_rate := NULL;
        b.lowered_at := NULL;
    END IF;
    UPDATE endpoint_rate_buckets SET tokens = v_tok, refilled_at = v_now, lowered_rate = b.lowered_rate, lowered_at = b.lowered_at,
           waited = waited + greatest(p_waited, 0)
     WHERE endpoint = p_endpoint;
    RETURN QUERY SELECT v_got, v_eff, greatest(least(p_want, v_size) - v_tok, 0) / v_eff;
END
$$;

-- rate_throttled records that endpoint p_endpoint's provider throttled a
-- request (a 429, a Lambda TooManyRequests) and, when the endpoint is
-- adaptive, applies the decrease of the rule above. It returns the
-- effective rate after it; NULL for an endpoint without a rate limit.
CREATE OR REPLACE FUNCTION rate_throttled(p_endpoint text)
RETURNS double precision
LANGUAGE plpgsql AS $$
DECLARE
    v_rate     double precision;
    v_burst    int;
    v_adaptive boolean;
    b          endpoint_rate_buckets%ROWTYPE;
    v_now      timestamptz;
    v_eff      double precision;
BEGIN
    SELECT e.rate_limit, e.burst, e.rate_adaptive INTO v_rate, v_burst, v_adaptive FROM endpoints e WHERE e.name = p_endpoint;
    IF v_rate IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO endpoint_rate_buckets (endpoint, tokens, refilled_at) VALUES (p_endpoint, v_burst, clock_timestamp())
        ON CONFLICT (endpoint) DO NOTHING;
    SELECT * INTO b FROM endpoint_rate_buckets WHERE endpoint = p_endpoint FOR UPDATE;
    v_now := clock_timestamp();
    v_eff := rate_effective(v_rate, b.lowered_rate, b.lowered_at, v_now);
    IF v_adaptive AND (b.lowered_at IS NULL OR v_now - b.lowered_at >= interval '1 second') THEN
        v_eff := greatest(v_eff / 2, v_rate / 32);
        UPDATE endpoint_rate_buckets SET tokens = 0, refilled_at = v_now, lowered_rate = v_eff, lowered_at = v_now,
               throttles = throttles + 1
         WHERE endpoint = p_endpoint;
    ELSE
        UPDATE endpoint_rate_buckets SET throttles = throttles + 1 WHERE endpoint = p_endpoint;
    END IF;
    RETURN v_eff;
END
$$;
