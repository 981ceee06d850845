package store

import (
	"context"
	"fmt"
	"time"
)

// RateLease is what one lease of an endpoint's shared token bucket got.
type RateLease struct {
	// Granted is the tokens taken: each is one request.
	Granted int
	// Effective is the endpoint's effective rate (requests per second);
	// 0 when it has no rate limit (everything asked was granted).
	Effective float64
	// Wait is how long until the bucket holds what was asked for again
	// (capped by its size); 0 when it does now.
	Wait time.Duration
}

// LeaseRateTokens takes up to want tokens from endpoint name's shared
// bucket (rate_lease, migrations/engine/rate_limits.sql), reporting waited
// requests sent after waiting for a token since the caller's last lease.
// One row lock per call: the pods' leases of one endpoint serialize.
func (s *Store) LeaseRateTokens(ctx context.Context, name string, want int, waited int64) (RateLease, error) {
	var (
		l    RateLease
		eff  *float64
		wait float64
	)
	err := s.pool.QueryRow(ctx, `SELECT granted, effective, wait_secs FROM rate_lease($1, $2, $3)`, name, want, waited).
		Scan(&l.Granted, &eff, &wait)
	if err != nil {
		return RateLease{}, fmt.Errorf("lease rate tokens of endpoint %s: %w", name, err)
	}
	if eff != nil {
		l.Effective = *eff
	}
	l.Wait = time.Duration(wait * float64(time.Second))
	return l, nil
}

// ReportRateThrottle records that endpoint name's provider throttled a
// request (a 429 or a Lambda throttle); an adaptive endpoint's rate drops
// as rate_throttled says. It returns the effective rate after it, 0 for an
// endpoint without a rate limit.
func (s *Store) ReportRateThrottle(ctx context.Context, name string) (float64, error) {
	var eff *float64
	if err := s.pool.QueryRow(ctx, `SELECT rate_throttled($1)`, name).Scan(&eff); err != nil {
		return 0, fmt.Errorf("report a throttle of endpoint %s: %w", name, err)
	}
	if eff == nil {
		return 0, nil
	}
	return *eff, nil
}
