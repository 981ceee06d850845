package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Idempotency keys: a request sent with one runs once, and its retries get
// its answer (the API's idempotency middleware; docs/api.md "Idempotency
// keys"). The store keeps one row per (caller, key): the fingerprint of
// the request that took the key and, while it runs, its owner id and a
// lease; then the answer it gave. The database resolves a race between
// duplicates: exactly one INSERT takes the key.

// IdempotencyParams names a request sent with an idempotency key.
type IdempotencyParams struct {
	// Caller is who sent it (the API's hash of its bearer token); keys of
	// different callers never meet. Empty on an API without tokens.
	Caller []byte
	// Key is the client's Idempotency-Key.
	Key string
	// Request is the request's fingerprint: the same key sent with another
	// request is refused.
	Request []byte
	// Lease is how long the request may run: past it, a request that took
	// the key and has not answered is presumed dead (IdempotencyLost).
	Lease time.Duration
	// Retention is how long the key and its answer are kept.
	Retention time.Duration
	// Box, when set, encrypts a stored answer's body (an answer may carry
	// a signing secret, shown once) and opens the ones it sealed.
	Box *SecretBox
}

// IdempotencyState says where a key stands for a request presenting it.
type IdempotencyState int

// The states of a key.
const (
	// IdempotencyTaken: this request took the key and runs; it ends by
	// IdempotencyFinish (answered) or IdempotencyRelease (changed nothing).
	IdempotencyTaken IdempotencyState = iota
	// IdempotencyAnswered: a request with the key has answered; the
	// answer is returned for this one to repeat.
	IdempotencyAnswered
	// IdempotencyRunning: a request with the key is running; ask again.
	IdempotencyRunning
	// IdempotencyLost: the request that took the key ended (its process
	// stopped) without answering; whether it took effect is unknown.
	IdempotencyLost
	// IdempotencyMismatch: the key was taken by a different request.
	IdempotencyMismatch
)

// IdempotentAnswer is an answer kept for the retries of its request.
type IdempotentAnswer struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

// Idempotency is a key's state for one request.
type Idempotency struct {
	State IdempotencyState
	// Owner is the request's own id when it took the key.
	Owner uuid.UUID
	// Answer is the first request's answer, when State is
	// IdempotencyAnswered.
	Answer IdempotentAnswer
}

// idempotencyTakeSQL takes the key unless a live row holds it (an expired
// one, not yet pruned, is taken over), else reads the row that does.
const idempotencyTakeSQL = `WITH took AS (
    INSERT INTO idempotency_keys AS k (caller, key, request, owner, lease_until, expires_at)
    VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5), now() + make_interval(secs => $6))
    ON CONFLICT (caller, key) DO UPDATE SET request = EXCLUDED.request, owner = EXCLUDED.owner,
        lease_until = EXCLUDED.lease_until, status = NULL, headers = NULL, body = NULL, sealed = false,
        created_at = now(), expires_at = EXCLUDED.expires_at
    WHERE k.expires_at < now()
    RETURNING true
)
SELECT true, NULL::bytea, false, false, NULL::int, NULL::jsonb, NULL::bytea, false FROM took
UNION ALL
SELECT false, request, owner IS NOT NULL, lease_until < now(), status::int, headers, body, sealed
  FROM idempotency_keys WHERE caller = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM took)`

// IdempotencyTake takes p's key for the request, or says why it cannot
// run: another request with the key answered, is running, was lost, or
// was a different request.
func (s *Store) IdempotencyTake(ctx context.Context, p IdempotencyParams) (Idempotency, error) {
	owner, err := uuid.NewRandom()
	if err != nil {
		return Idempotency{}, err
	}
	caller := nonNil(p.Caller)
	// An INSERT that waited for a duplicate's to commit conflicts but,
	// reading in its own snapshot, cannot see that row: run it again.
	for range maxWriteAttempts {
		var (
			took, running, lapsed, sealed bool
			request, body                 []byte
			status                        *int
			headers                       map[string]string
		)
		err := s.pool.QueryRow(ctx, idempotencyTakeSQL, caller, p.Key, p.Request, owner, p.Lease.Seconds(), p.Retention.Seconds()).
			Scan(&took, &request, &running, &lapsed, &status, &headers, &body, &sealed)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return Idempotency{}, fmt.Errorf("take idempotency key: %w", err)
		}
		switch {
		case took:
			return Idempotency{State: IdempotencyTaken, Owner: owner}, nil
		case string(request) != string(p.Request):
			return Idempotency{State: IdempotencyMismatch}, nil
		case running && lapsed:
			return Idempotency{State: IdempotencyLost}, nil
		case running:
			return Idempotency{State: IdempotencyRunning}, nil
		}
		if sealed {
			if p.Box == nil {
				return Idempotency{}, errors.New("take idempotency key: the stored answer is encrypted and no secret key (CONVERGE_SECRET_KEY) is configured")
			}
			if body, err = p.Box.Open(body, idempotencyAAD(caller, p.Key)); err != nil {
				return Idempotency{}, fmt.Errorf("take idempotency key: open the stored answer: %w", err)
			}
		}
		return Idempotency{State: IdempotencyAnswered, Answer: IdempotentAnswer{Status: *status, Headers: headers, Body: body}}, nil
	}
	return Idempotency{}, errors.New("take idempotency key: the key changed hands under every attempt")
}

// idempotencyAAD binds a sealed answer to its key.
func idempotencyAAD(caller []byte, key string) []byte {
	return append(append([]byte("idempotency:"), caller...), key...)
}

// IdempotencyFinish stores the answer of the request that took p's key as
// owner, for its retries to repeat until the key expires.
func (s *Store) IdempotencyFinish(ctx context.Context, p IdempotencyParams, owner uuid.UUID, a IdempotentAnswer) error {
	body, sealed := a.Body, false
	if p.Box != nil {
		var err error
		if body, err = p.Box.Seal(a.Body, idempotencyAAD(p.Caller, p.Key)); err != nil {
			return fmt.Errorf("finish idempotency key: %w", err)
		}
		sealed = true
	}
	if _, err := s.pool.Exec(ctx, `UPDATE idempotency_keys SET owner = NULL, status = $4, headers = $5, body = $6, sealed = $7
		WHERE caller = $1 AND key = $2 AND owner = $3`, nonNil(p.Caller), p.Key, owner, a.Status, a.Headers, body, sealed); err != nil {
		return fmt.Errorf("finish idempotency key: %w", err)
	}
	return nil
}

// IdempotencyRelease frees p's key, taken by owner, for a request that
// changed nothing (it was refused): its retry runs afresh.
func (s *Store) IdempotencyRelease(ctx context.Context, p IdempotencyParams, owner uuid.UUID) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE caller = $1 AND key = $2 AND owner = $3`,
		nonNil(p.Caller), p.Key, owner); err != nil {
		return fmt.Errorf("release idempotency key: %w", err)
	}
	return nil
}

// PruneIdempotencyKeys deletes up to limit expired keys, oldest first, and
// returns how many.
func (s *Store) PruneIdempotencyKeys(ctx context.Context, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys k
		 USING (SELECT caller, key FROM idempotency_keys WHERE expires_at < now() ORDER BY expires_at LIMIT $1) old
		 WHERE k.caller = old.caller AND k.key = old.key`, limit)
	if err != nil {
		return 0, fmt.Errorf("prune idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}

// nonNil is b, or an empty slice for nil: the caller column is NOT NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
