package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/internal/pgrun"
)

// Delivery log limits and retention defaults.
const (
	// DeliveryExcerptMax bounds the response excerpt kept per attempt.
	DeliveryExcerptMax = 512
	// DeliveryLogKeepDefault is how many attempts the reaper keeps per
	// endpoint (DELIVERY_LOG_KEEP).
	DeliveryLogKeepDefault = 10_000
	// DeliveryLogMaxAgeDefault is how long the reaper keeps an attempt
	// (DELIVERY_LOG_MAX_AGE).
	DeliveryLogMaxAgeDefault = 168 * time.Hour
)

// The classifications of an attempt that did not fail; every other one is
// a failure (Delivery.Failed, and the failed column's definition in
// migrations/00024_delivery_log.sql).
const (
	DeliveryOK         = "ok"          // an outcome answered inline
	DeliveryAccepted   = "accepted"    // 202: the outcome comes by callback
	DeliveryCallbackOK = "callback_ok" // the callback of an accepted task, with an outcome
	// DeliveryCallbackError is the callback of an accepted task reporting
	// the task's error.
	DeliveryCallbackError = "callback_error"
)

// DeliveryClassifications lists every classification the log holds, for
// the API's filter: the outcomes, then the failure classes the dispatcher
// gives an attempt (its deliveries_total result label).
var DeliveryClassifications = []string{ // a constant table
	DeliveryOK, "task_error", DeliveryAccepted, DeliveryCallbackOK, DeliveryCallbackError,
	"rate_limited", "gone", "redirect", "client_error", "server_error", "retryable", "unexpected",
	"malformed", "too_large", "timeout", "deadline", "network", "blocked", "cancelled", "async_timeout",
}

// DeliveryResource is the resource an attempt was for, as it was named
// then.
type DeliveryResource struct {
	ID string `json:"id,omitempty"`
	// Namespace is the resource's namespace. RecordDeliveries looks it up
	// by ID when it is "".
	Namespace string `json:"namespace,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Name      string `json:"name,omitempty"`
}

// Delivery is one attempt of the delivery log: a task sent to an endpoint
// (alone or in a batch), or the callback of one it accepted.
type Delivery struct {
	ID       int64            `json:"id"`
	Endpoint string           `json:"endpoint"`
	At       time.Time        `json:"at" doc:"When the attempt was sent, or the callback received."`
	Resource DeliveryResource `json:"resource"`
	TaskID   string           `json:"task_id"`
	TaskType string           `json:"task_type,omitempty" doc:"reconcile, delete, operate or react; absent on a callback of a task that is not an operation."`
	Action   string           `json:"action,omitempty" doc:"The verb of an operate task."`
	// ClaimEpoch and Attempt identify the claim: a replay's attempt has a
	// new claim epoch.
	ClaimEpoch int64 `json:"claim_epoch"`
	Attempt    int   `json:"attempt"`
	// HTTPStatus is 0 when no response came (network error, timeout).
	HTTPStatus     int    `json:"http_status"`
	LatencyMS      int    `json:"latency_ms" doc:"From sending to the answer; for a callback, from the delivery to the callback."`
	Classification string `json:"classification" doc:"ok, task_error, accepted, callback_ok, callback_error, or a failure class: rate_limited, gone, redirect, client_error, server_error, retryable, unexpected, malformed, too_large, timeout, deadline, network, blocked, cancelled, async_timeout."`
	Failed         bool   `json:"failed" doc:"Every classification but ok, accepted and callback_ok."`
	Excerpt        string `json:"excerpt,omitempty" doc:"For a failure, the first bytes (at most 512) of the response body, or the error; empty for a success."`
}

// deliveriesRecordSQL appends attempts in input order. Rows of an endpoint
// deleted meanwhile are dropped. A row with no namespace takes its
// resource's (a probe of its primary key, which coalesce skips for a row
// that has one), or the default one when the resource is gone.
const deliveriesRecordSQL = `INSERT INTO endpoint_deliveries (endpoint, at, task_id, resource_id, kind, name, task_type, action,
        claim_epoch, attempt, http_status, latency_ms, classification, excerpt, namespace)
SELECT x.endpoint, x.at, x.task_id, x.resource_id, x.kind, x.name, x.task_type, x.action,
       x.claim_epoch, x.attempt, x.http_status, x.latency_ms, x.classification, x.excerpt,
       coalesce(nullif(x.namespace, ''), (SELECT r.namespace FROM resources r WHERE r.id = x.resource_id), '` + DefaultNamespace + `')
  FROM unnest($1::text[], $2::timestamptz[], $3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::text[], $8::text[],
              $9::bigint[], $10::int[], $11::int[], $12::int[], $13::text[], $14::text[], $15::text[])
       WITH ORDINALITY AS x(endpoint, at, task_id, resource_id, kind, name, task_type, action,
                            claim_epoch, attempt, http_status, latency_ms, classification, excerpt, namespace, ord)
 WHERE EXISTS (SELECT 1 FROM endpoints e WHERE e.name = x.endpoint)
 ORDER BY x.ord`

// deliveriesLookupSQL is deliveriesRecordSQL for a batch with rows that
// have no resource name (a callback's, an async timeout's: the token names
// only the task and resource): those take the resource's kind and name,
// and the verb of the operation whose task it was. The lookup is a probe
// per row of the batch (a LATERAL join's filter is applied after it), so
// the dispatcher's batches, whose rows are all named, go without it: it
// cost them a third of the insert.
const deliveriesLookupSQL = `INSERT INTO endpoint_deliveries (endpoint, at, task_id, resource_id, kind, name, task_type, action,
        claim_epoch, attempt, http_status, latency_ms, classification, excerpt, namespace)
SELECT x.endpoint, x.at, x.task_id, x.resource_id, coalesce(f.kind, x.kind), coalesce(f.name, x.name),
       CASE WHEN x.task_type = '' AND f.verb IS NOT NULL THEN 'operate' ELSE x.task_type END,
       CASE WHEN x.action = '' THEN coalesce(f.verb, '') ELSE x.action END,
       x.claim_epoch, x.attempt, x.http_status, x.latency_ms, x.classification, x.excerpt,
       coalesce(nullif(x.namespace, ''), f.namespace, (SELECT r.namespace FROM resources r WHERE r.id = x.resource_id), '` + DefaultNamespace + `')
  FROM unnest($1::text[], $2::timestamptz[], $3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::text[], $8::text[],
              $9::bigint[], $10::int[], $11::int[], $12::int[], $13::text[], $14::text[], $15::text[])
       WITH ORDINALITY AS x(endpoint, at, task_id, resource_id, kind, name, task_type, action,
                            claim_epoch, attempt, http_status, latency_ms, classification, excerpt, namespace, ord)
  LEFT JOIN LATERAL (SELECT r.kind, r.name, r.namespace, (SELECT o.verb FROM resource_operations o WHERE o.id = x.task_id) AS verb
                       FROM resources r WHERE x.name = '' AND r.id = x.resource_id) f ON true
 WHERE EXISTS (SELECT 1 FROM endpoints e WHERE e.name = x.endpoint)
 ORDER BY x.ord`

// RecordDeliveries appends attempts to the delivery log in one statement
// (the dispatcher calls it once per completion batch); the reaper prunes
// the log (PruneDeliveries), so the insert does nothing else. A Delivery
// with no Resource.Name takes its resource's kind and name from the
// database. Excerpts are cut to DeliveryExcerptMax bytes on a UTF-8
// boundary.
func (s *Store) RecordDeliveries(ctx context.Context, ds []Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	n := len(ds)
	var (
		eps         = make([]string, n)
		ats         = make([]time.Time, n)
		tasks       = make([]string, n)
		res         = make([]string, n) // "": NULL
		kinds       = make([]string, n)
		names       = make([]string, n)
		types       = make([]string, n)
		actions     = make([]string, n)
		claimEpochs = make([]int64, n)
		attempts    = make([]int32, n)
		statuses    = make([]*int32, n)
		lats        = make([]int32, n)
		classes     = make([]string, n)
		excerpts    = make([]string, n)
		nss         = make([]string, n)
	)
	now := time.Now()
	sql := deliveriesRecordSQL
	for i := range ds {
		d := &ds[i]
		if d.Resource.Name == "" {
			sql = deliveriesLookupSQL
		}
		eps[i], tasks[i], claimEpochs[i], attempts[i] = d.Endpoint, d.TaskID, d.ClaimEpoch, int32(d.Attempt)
		kinds[i], names[i], types[i], actions[i] = d.Resource.Kind, d.Resource.Name, d.TaskType, d.Action
		ats[i] = d.At
		if ats[i].IsZero() {
			ats[i] = now
		}
		res[i], nss[i] = d.Resource.ID, d.Resource.Namespace
		if d.HTTPStatus != 0 {
			st := int32(d.HTTPStatus)
			statuses[i] = &st
		}
		lats[i] = int32(min(max(d.LatencyMS, 0), 1<<31-1))
		classes[i] = d.Classification
		excerpts[i] = excerpt(d.Excerpt, DeliveryExcerptMax)
	}
	if _, err := s.pool.Exec(ctx, sql, eps, ats, pgrun.UUIDArray(tasks), pgrun.UUIDArray(res), kinds, names, types, actions,
		claimEpochs, attempts, statuses, lats, classes, excerpts, nss); err != nil {
		return fmt.Errorf("record deliveries: %w", err)
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

// deliveryCols are the columns scanDelivery reads.
const deliveryCols = `d.id, d.endpoint, d.at, coalesce(d.resource_id::text, ''), d.namespace, d.kind, d.name, d.task_id, d.task_type, d.action,
       d.claim_epoch, d.attempt, coalesce(d.http_status, 0), d.latency_ms, d.classification, d.failed, d.excerpt`

func scanDelivery(row pgx.Row) (Delivery, error) {
	var d Delivery
	err := row.Scan(&d.ID, &d.Endpoint, &d.At, &d.Resource.ID, &d.Resource.Namespace, &d.Resource.Kind, &d.Resource.Name, &d.TaskID, &d.TaskType,
		&d.Action, &d.ClaimEpoch, &d.Attempt, &d.HTTPStatus, &d.LatencyMS, &d.Classification, &d.Failed, &d.Excerpt)
	return d, err
}

// DeliveryFilter selects one page of the delivery log, newest first.
type DeliveryFilter struct {
	// Namespace keeps the attempts for the resources of one namespace (""
	// is DefaultNamespace); AllNamespaces keeps every namespace's.
	Namespace string
	// Endpoint keeps one endpoint's attempts.
	Endpoint string
	// Kind keeps one kind's attempts; with Name, one resource's, by the
	// name it had then (Name needs Kind). ResourceID narrows them to one
	// incarnation.
	Kind, Name string
	ResourceID string
	// Classification keeps attempts so classified (one of
	// DeliveryClassifications).
	Classification string
	// Failed keeps failures only.
	Failed bool
	// Since keeps attempts at or after it.
	Since time.Time
	// Until keeps attempts before it; with Since, it must be after Since.
	Until time.Time
	// Limit is the page size: ListLimitDefault when 0, at most ListLimitMax.
	Limit int
	// Cursor continues after the page that returned it.
	Cursor string
}

// ListDeliveries pages through the delivery log newest first with an id
// keyset cursor; each filter is served by an index (endpoint, resource,
// failures) and the rest are checked on the rows that range returns.
// Invalid parameters are an *InvalidError naming the parameter.
func (s *Store) ListDeliveries(ctx context.Context, f DeliveryFilter) (Page[Delivery], error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return Page[Delivery]{}, err
	}
	var (
		q   strings.Builder
		qa  queryArgs
		arg = qa.add
	)
	q.WriteString(`SELECT ` + deliveryCols + ` FROM endpoint_deliveries d WHERE true`)
	if ns := orDefault(f.Namespace); ns != AllNamespaces {
		q.WriteString(` AND d.namespace = ` + arg(ns))
	}
	if f.Endpoint != "" {
		q.WriteString(` AND d.endpoint = ` + arg(f.Endpoint))
	}
	switch {
	case f.Kind != "" && f.Name != "":
		q.WriteString(` AND d.kind = ` + arg(f.Kind) + ` AND d.name = ` + arg(f.Name))
	case f.Kind != "":
		q.WriteString(` AND d.kind = ` + arg(f.Kind))
	case f.Name != "":
		return Page[Delivery]{}, &InvalidError{Location: "kind", Message: "is required with name: a resource is its kind and name"}
	}
	if f.ResourceID != "" {
		q.WriteString(` AND d.resource_id = ` + arg(f.ResourceID) + `::uuid`)
	}
	if f.Classification != "" {
		if !slices.Contains(DeliveryClassifications, f.Classification) {
			return Page[Delivery]{}, &InvalidError{Location: "classification",
				Message: fmt.Sprintf("%q is not one of %s", f.Classification, strings.Join(DeliveryClassifications, ", "))}
		}
		q.WriteString(` AND d.classification = ` + arg(f.Classification))
	}
	if f.Failed {
		q.WriteString(` AND d.failed`)
	}
	if !f.Since.IsZero() {
		q.WriteString(` AND d.at >= ` + arg(f.Since))
	}
	if !f.Until.IsZero() {
		if !f.Since.IsZero() && !f.Until.After(f.Since) {
			return Page[Delivery]{}, &InvalidError{Location: "until", Message: "must be after since: the window would be empty"}
		}
		q.WriteString(` AND d.at < ` + arg(f.Until))
	}
	if f.Cursor != "" {
		id, err := decodeIDCursor(f.Cursor, "d")
		if err != nil {
			return Page[Delivery]{}, &InvalidError{Location: "cursor", Message: "is not a cursor this server issued"}
		}
		q.WriteString(` AND d.id < ` + arg(id))
	}
	q.WriteString(` ORDER BY d.id DESC LIMIT ` + arg(limit+1))
	items, err := pgrun.Collect(ctx, s.reader(ctx), func(r pgx.CollectableRow) (Delivery, error) { return scanDelivery(r) },
		q.String(), qa...)
	if err != nil {
		return Page[Delivery]{}, fmt.Errorf("list deliveries: %w", err)
	}
	return idDescPage(items, limit, "d", func(e Delivery) int64 { return e.ID }), nil
}

// GetDelivery returns one attempt, or a *NotFoundError.
func (s *Store) GetDelivery(ctx context.Context, id int64) (Delivery, error) {
	d, err := scanDelivery(s.reader(ctx).QueryRow(ctx, `SELECT `+deliveryCols+` FROM endpoint_deliveries d WHERE d.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, &NotFoundError{Message: fmt.Sprintf("delivery %d does not exist (it may have been pruned)", id)}
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("get delivery %d: %w", id, err)
	}
	return d, nil
}

// Replay is what ReplayDelivery scheduled.
type Replay struct {
	Delivery Delivery `json:"delivery" doc:"The attempt replayed."`
	// Operation is the new operation, when the attempt was an operation's.
	Operation *Operation `json:"operation,omitempty" doc:"The new operation of the same verb and input, when the replayed attempt was an operation's."`
}

// ReplayDelivery runs the task of attempt id again as a new claim, through
// the engine's own scheduling: a reconcile or delete task through
// reconcile_now (a queued task runs at once with its attempts reset; a
// settled resource is re-queued; a resource being deleted retries its
// teardown), an operation as a new operation of the same verb and input.
// The stored outcome is never applied again: the provider is asked anew.
// An operator event "replayed delivery N" is logged on the resource.
//
// Errors: *NotFoundError for an unknown id; *ConflictError when the
// resource no longer exists, is quarantined or orphaned, is being deleted
// and the attempt was not of its teardown, or the attempt was a reactor
// delivery (those are retried from the lifecycle outbox, not replayed).
func (s *Store) ReplayDelivery(ctx context.Context, id int64) (Replay, error) {
	d, err := s.GetDelivery(ctx, id)
	if err != nil {
		return Replay{}, err
	}
	rep := Replay{Delivery: d}
	gone := &ConflictError{Message: fmt.Sprintf("delivery %d was for resource %s/%s, which no longer exists", id, d.Resource.Kind, d.Resource.Name)}
	if d.TaskType == "react" {
		return rep, &ConflictError{Message: fmt.Sprintf("delivery %d was a reactor delivery: the lifecycle outbox retries those; it cannot be replayed", id)}
	}
	if d.Resource.ID == "" {
		return rep, gone
	}
	event := fmt.Sprintf("replayed delivery %d (task %s, claim epoch %d, %s at endpoint %s)", id, d.TaskID, d.ClaimEpoch, d.Classification, d.Endpoint)
	var op *Operation
	if d.TaskType == "operate" || d.TaskType == "" {
		if op, err = s.replayOperation(ctx, d); err != nil {
			return rep, err
		}
	}
	if op != nil {
		rep.Operation = op
		_, err := s.pool.Exec(ctx, `INSERT INTO resource_events (resource_id, type, generation, message)
			SELECT id, 'delivery_replayed', generation, $2 FROM resources WHERE id = $1`, d.Resource.ID, event+": operation "+op.ID)
		return rep, wrapUnlessTyped(err, "record the replay of delivery %d", id)
	}
	err = pgrun.RetryDeadlock(func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var deleting, frozen bool
			err := tx.QueryRow(ctx, `SELECT deletion_requested_at IS NOT NULL, frozen_until IS NOT NULL FROM resources WHERE id = $1 FOR UPDATE`,
				d.Resource.ID).Scan(&deleting, &frozen)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return gone
			case err != nil:
				return err
			case deleting && d.TaskType == "reconcile":
				return &ConflictError{Message: fmt.Sprintf("%s/%s is being deleted: its %s task will not run again; replay a delivery of its delete task, or reconcile it to retry the teardown",
					d.Resource.Kind, d.Resource.Name, "reconcile")}
			case !deleting && d.TaskType == "delete":
				return &ConflictError{Message: fmt.Sprintf("%s/%s is no longer being deleted: its delete task cannot run", d.Resource.Kind, d.Resource.Name)}
			}
			var ok bool
			if err := tx.QueryRow(ctx, `SELECT reconcile_now($1)`, d.Resource.ID).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return &ConflictError{Message: fmt.Sprintf("%s/%s is orphaned or quarantined; it cannot run now", d.Resource.Kind, d.Resource.Name)}
			}
			_, err = tx.Exec(ctx, `INSERT INTO resource_events (resource_id, type, generation, message)
				SELECT id, 'delivery_replayed', generation, $2 FROM resources WHERE id = $1`, d.Resource.ID, event)
			return err
		})
	})
	return rep, wrapUnlessTyped(err, "replay delivery %d", id)
}

// replayOperation invokes the operation whose task attempt d was (an
// operate task's id is its operation's) again, with the same verb and
// input; nil when d was not an operation's.
func (s *Store) replayOperation(ctx context.Context, d Delivery) (*Operation, error) {
	var verb string
	var input []byte
	err := s.pool.QueryRow(ctx, `SELECT verb, input FROM resource_operations WHERE id = $1`, d.TaskID).Scan(&verb, &input)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && d.TaskType == "operate":
		return nil, &ConflictError{Message: fmt.Sprintf("the operation of delivery %d no longer exists (deleted with its resource)", d.ID)}
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the operation of delivery %d: %w", d.ID, err)
	}
	op, err := s.CreateOperation(ctx, d.Resource.Namespace, d.Resource.Kind, d.Resource.Name, verb, input)
	if errors.Is(err, ErrNotFound) {
		return nil, &ConflictError{Message: fmt.Sprintf("delivery %d cannot be replayed: %v", d.ID, err)}
	}
	if err != nil {
		return nil, err
	}
	return &op, nil
}

// PruneDeliveries bounds the delivery log: it deletes the attempts older
// than maxAge (those recorded before the first one at or after the
// cutoff, at most limit rows a call) and, for each endpoint, all but its
// newest keep. It returns how many rows went for their age (limit: there
// may be more) and for the count. The reaper calls it periodically, off
// the dispatch path.
func (s *Store) PruneDeliveries(ctx context.Context, maxAge time.Duration, keep, limit int) (aged, counted int64, err error) {
	// The first young row is found walking the primary key from the oldest:
	// the walk costs what is deleted, and ids follow insertion, so every
	// row before it is old.
	byAge, err := s.pool.Exec(ctx, `DELETE FROM endpoint_deliveries d
		 USING (SELECT k.id FROM endpoint_deliveries k
		         WHERE k.id < coalesce((SELECT y.id FROM endpoint_deliveries y WHERE y.at >= $1 ORDER BY y.id LIMIT 1), 9223372036854775807)
		         ORDER BY k.id LIMIT $2) old
		 WHERE d.id = old.id`, time.Now().Add(-maxAge), limit)
	if err != nil {
		return 0, 0, fmt.Errorf("prune deliveries by age: %w", err)
	}
	// Each endpoint's cutoff is found once (LATERAL), walking its index
	// from the newest.
	byCount, err := s.pool.Exec(ctx, `DELETE FROM endpoint_deliveries d
		 USING (SELECT e.name, c.id FROM endpoints e
		         CROSS JOIN LATERAL (SELECT k.id FROM endpoint_deliveries k WHERE k.endpoint = e.name
		                              ORDER BY k.id DESC OFFSET $1 LIMIT 1) c) cut
		 WHERE d.endpoint = cut.name AND d.id <= cut.id`, keep)
	if err != nil {
		return byAge.RowsAffected(), 0, fmt.Errorf("prune deliveries by count: %w", err)
	}
	return byAge.RowsAffected(), byCount.RowsAffected(), nil
}
