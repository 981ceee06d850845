package store

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Delivery log limits.
const (
	// DeliveryExcerptMax bounds the response excerpt kept per failed delivery.
	DeliveryExcerptMax = 512
	// DeliveriesKeepDefault is how many failed deliveries are kept per
	// endpoint; older ones are pruned as new ones are recorded.
	DeliveriesKeepDefault = 1000
)

// EndpointDelivery is one failed delivery attempt, as the endpoint's and the
// resource's detail show it.
type EndpointDelivery struct {
	ID         int64     `json:"id" db:"id"`
	Endpoint   string    `json:"endpoint" db:"endpoint"`
	At         time.Time `json:"at" db:"at"`
	TaskID     string    `json:"task_id" db:"task_id"`
	ResourceID string    `json:"resource_id,omitempty" db:"resource_id"`
	ClaimEpoch int64     `json:"claim_epoch" db:"claim_epoch"`
	Attempt    int       `json:"attempt" db:"attempt"`
	// HTTPStatus is 0 when no response came (network error, timeout).
	HTTPStatus int    `json:"http_status,omitempty" db:"http_status"`
	LatencyMS  int    `json:"latency_ms" db:"latency_ms"`
	Reason     string `json:"reason" db:"reason" doc:"The classified failure, e.g. server_error, timeout, network, redirect."`
	Excerpt    string `json:"excerpt,omitempty" db:"excerpt" doc:"The first bytes (at most 512) of the response body, or the error."`
}

const deliveriesRecordSQL = `WITH ins AS (
    INSERT INTO endpoint_deliveries (endpoint, at, task_id, resource_id, claim_epoch, attempt, http_status, latency_ms, reason, excerpt)
    SELECT x.endpoint, x.at, x.task_id, x.resource_id, x.claim_epoch, x.attempt, x.http_status, x.latency_ms, x.reason, x.excerpt
      FROM unnest($1::text[], $2::timestamptz[], $3::uuid[], $4::uuid[], $5::bigint[], $6::int[], $7::int[], $8::int[], $9::text[], $10::text[])
           WITH ORDINALITY AS x(endpoint, at, task_id, resource_id, claim_epoch, attempt, http_status, latency_ms, reason, excerpt, ord)
     WHERE EXISTS (SELECT 1 FROM endpoints e WHERE e.name = x.endpoint)
     ORDER BY x.ord
    RETURNING endpoint
)
DELETE FROM endpoint_deliveries d
 USING (SELECT n.endpoint, c.id
          FROM (SELECT DISTINCT endpoint FROM ins) n
         CROSS JOIN LATERAL (SELECT k.id FROM endpoint_deliveries k WHERE k.endpoint = n.endpoint
                              ORDER BY k.id DESC OFFSET $11 LIMIT 1) c) cut
 WHERE d.endpoint = cut.endpoint AND d.id < cut.id`

// RecordDeliveryFailures appends failed delivery attempts in one statement
// and, in the same statement, prunes each touched endpoint's log to about its
// newest DeliveriesKeepDefault rows (the prune sees the log as it was before
// this batch, so it may briefly hold up to one batch more). Each endpoint's
// cutoff is found once (LATERAL); as a correlated subquery it was walked
// once per row of the log, 168 ms a batch during an outage, now 6.5 ms.
// Failures of an endpoint deleted meanwhile are dropped. Excerpts are cut
// to DeliveryExcerptMax bytes on a UTF-8 boundary.
func (s *Store) RecordDeliveryFailures(ctx context.Context, ds []EndpointDelivery) error {
	if len(ds) == 0 {
		return nil
	}
	n := len(ds)
	var (
		eps      = make([]string, n)
		ats      = make([]time.Time, n)
		tasks    = make([]string, n)
		res      = make([]*string, n)
		epochs   = make([]int64, n)
		attempts = make([]int32, n)
		statuses = make([]*int32, n)
		lats     = make([]int32, n)
		reasons  = make([]string, n)
		excerpts = make([]string, n)
	)
	now := time.Now()
	for i, d := range ds {
		eps[i], tasks[i], epochs[i], attempts[i] = d.Endpoint, d.TaskID, d.ClaimEpoch, int32(d.Attempt)
		ats[i] = d.At
		if ats[i].IsZero() {
			ats[i] = now
		}
		if d.ResourceID != "" {
			res[i] = &d.ResourceID
		}
		if d.HTTPStatus != 0 {
			st := int32(d.HTTPStatus)
			statuses[i] = &st
		}
		lats[i] = int32(min(max(d.LatencyMS, 0), 1<<31-1))
		reasons[i] = d.Reason
		excerpts[i] = excerpt(d.Excerpt, DeliveryExcerptMax)
	}
	if _, err := s.pool.Exec(ctx, deliveriesRecordSQL, eps, ats, tasks, res, epochs, attempts, statuses, lats, reasons, excerpts,
		DeliveriesKeepDefault-1); err != nil {
		return fmt.Errorf("record delivery failures: %w", err)
	}
	return nil
}

// excerpt returns at most n bytes of s, cut on a UTF-8 boundary, with
// invalid UTF-8 and NUL bytes (which a text column refuses) replaced.
func excerpt(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// deliveryCols are the columns of an EndpointDelivery, named for its db tags.
const deliveryCols = `id, endpoint, at, task_id, coalesce(resource_id::text, '') AS resource_id, claim_epoch, attempt,
       coalesce(http_status, 0) AS http_status, latency_ms, reason, excerpt`

// ListDeliveries returns the endpoint's newest failed deliveries, newest
// first. An unknown endpoint is a *NotFoundError.
func (s *Store) ListDeliveries(ctx context.Context, endpoint string, limit int) ([]EndpointDelivery, error) {
	if _, err := s.GetEndpoint(ctx, endpoint); err != nil {
		return nil, err
	}
	rows, err := s.reader(ctx).Query(ctx, `SELECT `+deliveryCols+` FROM endpoint_deliveries
		WHERE endpoint = $1 ORDER BY id DESC LIMIT $2`, endpoint, clampLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list deliveries of %s: %w", endpoint, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[EndpointDelivery])
	if err != nil {
		return nil, fmt.Errorf("list deliveries of %s: %w", endpoint, err)
	}
	return out, nil
}

// ListDeliveriesForResource returns the newest failed deliveries of the
// resource's tasks across all endpoints, newest first.
func (s *Store) ListDeliveriesForResource(ctx context.Context, resourceID string, limit int) ([]EndpointDelivery, error) {
	rows, err := s.reader(ctx).Query(ctx, `SELECT `+deliveryCols+` FROM endpoint_deliveries
		WHERE resource_id = $1 ORDER BY id DESC LIMIT $2`, resourceID, clampLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list deliveries of resource %s: %w", resourceID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[EndpointDelivery])
	if err != nil {
		return nil, fmt.Errorf("list deliveries of resource %s: %w", resourceID, err)
	}
	return out, nil
}

func clampLimit(limit int) int {
	if limit <= 0 || limit > DeliveriesKeepDefault {
		return 100
	}
	return limit
}
