package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
)

// The alert event types (docs/operations.md "Paging on alerts").
const (
	AlertEndpointDisabled = "endpoint.disabled"
	AlertBreakerOpened    = "breaker.opened"
	AlertBreakerClosed    = "breaker.closed"
	AlertResourceFailed   = "resource.failed"
	AlertKindParked       = "kind.parked"
)

// AlertTypes lists every alert event type.
var AlertTypes = []string{AlertEndpointDisabled, AlertBreakerOpened, AlertBreakerClosed, AlertResourceFailed, AlertKindParked}

// The sink types.
const (
	SinkWebhook     = "webhook"
	SinkEventBridge = "eventbridge"
	SinkSNS         = "sns"
	SinkSQS         = "sqs"
)

// SinkTypes lists every sink type.
var SinkTypes = []string{SinkWebhook, SinkEventBridge, SinkSNS, SinkSQS}

// AlertEvent is one state change an operator may page on. ID is stable
// across redeliveries: every sink carries it as the message's dedup id.
type AlertEvent struct {
	ID           string    `json:"id" db:"id" doc:"Stable across redeliveries: the dedup id every sink carries."`
	At           time.Time `json:"at" db:"at"`
	Type         string    `json:"type" db:"type" enum:"endpoint.disabled,breaker.opened,breaker.closed,resource.failed,kind.parked"`
	Endpoint     string    `json:"endpoint,omitempty" db:"endpoint"`
	Kind         string    `json:"kind,omitempty" db:"kind"`
	KindVersion  int       `json:"kind_version,omitempty" db:"kind_version"`
	ResourceID   *string   `json:"resource_id,omitempty" db:"resource_id"`
	ResourceName string    `json:"resource_name,omitempty" db:"resource_name"`
	Source       string    `json:"source,omitempty" db:"source" doc:"The pod that saw a pod-local change (a breaker, a parked kind)."`
	Message      string    `json:"message" db:"message"`
}

// AlertSink delivers the alert events it selects to a webhook, an
// EventBridge bus, an SNS topic or an SQS queue.
type AlertSink struct {
	Name       string    `json:"name" db:"name" doc:"Unique, operator-chosen handle."`
	Type       string    `json:"sink_type" db:"type" enum:"webhook,eventbridge,sns,sqs" doc:"Where the alerts go. (Not \"type\": conctl reads a document's type field as the object's type.)"`
	Target     string    `json:"target" db:"target" doc:"webhook: the https URL; eventbridge: the event bus name or ARN; sns: the topic ARN; sqs: the queue URL."`
	EventTypes []string  `json:"event_types" db:"event_types" doc:"The alert event types delivered."`
	Kinds      []string  `json:"kinds" db:"kinds" doc:"Only events of these kinds (events naming no kind never match a non-empty list); [] = every kind."`
	Endpoints  []string  `json:"endpoints" db:"endpoints" doc:"Only events of these endpoints (events naming no endpoint never match a non-empty list); [] = every endpoint."`
	Enabled    bool      `json:"enabled" db:"enabled" doc:"A disabled sink gets no new alerts, and those already queued for it wait until it is enabled again."`
	CreatedAt  time.Time `json:"created_at" db:"created_at" readOnly:"true"`
	UpdatedAt  time.Time `json:"updated_at" db:"updated_at" readOnly:"true"`
}

// PutAlertSinkParams is a sink as an operator declares it.
type PutAlertSinkParams struct {
	Name       string
	Type       string
	Target     string
	EventTypes []string
	Kinds      []string
	Endpoints  []string
	Enabled    bool
	// Secret is a webhook sink's signing secret (whsec_...); empty keeps
	// the current one, or generates one for a new webhook sink.
	Secret EndpointSecret
}

const sinkCols = `name, type, target, event_types, kinds, endpoints, enabled, created_at, updated_at`

func validateSinkParams(p PutAlertSinkParams) error {
	switch {
	case !endpointNameRE.MatchString(p.Name):
		return &InvalidError{Location: "name", Message: "must be 1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit"}
	case !slices.Contains(SinkTypes, p.Type):
		return &InvalidError{Location: "sink_type", Message: fmt.Sprintf("%q is not one of %s", p.Type, strings.Join(SinkTypes, ", "))}
	case p.Target == "":
		return &InvalidError{Location: "target", Message: "is required"}
	case len(p.EventTypes) == 0:
		return &InvalidError{Location: "event_types", Message: "must name at least one of " + strings.Join(AlertTypes, ", ")}
	case p.Type != SinkWebhook && p.Secret != "":
		return &InvalidError{Location: "secret", Message: "only a webhook sink is signed"}
	}
	for i, t := range p.EventTypes {
		if !slices.Contains(AlertTypes, t) {
			return &InvalidError{Location: fmt.Sprintf("event_types[%d]", i), Message: fmt.Sprintf("%q is not one of %s", t, strings.Join(AlertTypes, ", "))}
		}
	}
	for i, k := range p.Kinds {
		if !model.ValidKind(k) {
			return &InvalidError{Location: fmt.Sprintf("kinds[%d]", i), Message: "must be a kind name matching ^[a-z][a-z0-9-]{0,62}$"}
		}
	}
	return nil
}

func sinkList(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// PutAlertSink creates or updates the sink p.Name. It returns the sink,
// what the write did, and a webhook sink's signing secret when it was
// created or replaced (shown once, as an endpoint's). A target that does not
// fit the type is an *InvalidError naming "target", checked by validate
// (the API's URL and ARN rules).
func (s *Store) PutAlertSink(ctx context.Context, box *SecretBox, p PutAlertSinkParams) (AlertSink, ApplyResult, EndpointSecret, error) {
	if err := validateSinkParams(p); err != nil {
		return AlertSink{}, "", "", err
	}
	var (
		out    AlertSink
		result ApplyResult
		secret EndpointSecret
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var hasSecret bool
		err := tx.QueryRow(ctx, `SELECT secret_enc IS NOT NULL FROM alert_sinks WHERE name = $1 FOR UPDATE`, p.Name).Scan(&hasSecret)
		exists := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var enc []byte
		if p.Type == SinkWebhook && (p.Secret != "" || !hasSecret) {
			if secret, enc, err = newSealedSecret(ctx, box, "alert-sink/"+p.Name, p.Secret); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, `INSERT INTO alert_sinks AS s (name, type, target, event_types, kinds, endpoints, enabled, secret_enc)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT (name) DO UPDATE SET type = EXCLUDED.type, target = EXCLUDED.target, event_types = EXCLUDED.event_types,
        kinds = EXCLUDED.kinds, endpoints = EXCLUDED.endpoints, enabled = EXCLUDED.enabled,
        secret_enc = CASE WHEN EXCLUDED.type <> 'webhook' THEN NULL ELSE coalesce(EXCLUDED.secret_enc, s.secret_enc) END,
        updated_at = clock_timestamp()
    WHERE (s.type, s.target, s.event_types, s.kinds, s.endpoints, s.enabled) IS DISTINCT FROM
          (EXCLUDED.type, EXCLUDED.target, EXCLUDED.event_types, EXCLUDED.kinds, EXCLUDED.endpoints, EXCLUDED.enabled)
       OR EXCLUDED.secret_enc IS NOT NULL OR (EXCLUDED.type <> 'webhook' AND s.secret_enc IS NOT NULL)`,
			p.Name, p.Type, p.Target, p.EventTypes, sinkList(p.Kinds), sinkList(p.Endpoints), p.Enabled, enc)
		if err != nil {
			return fmt.Errorf("upsert: %w", err)
		}
		result = upsertResult(exists, tag)
		out, err = pgrun.CollectOne(ctx, tx, pgx.RowToStructByName[AlertSink], `SELECT `+sinkCols+` FROM alert_sinks WHERE name = $1`, p.Name)
		return err
	})
	if err != nil {
		return AlertSink{}, "", "", wrapUnlessTyped(err, "put alert sink %s", p.Name)
	}
	return out, result, secret, nil
}

// GetAlertSink returns the sink name, or a *NotFoundError.
func (s *Store) GetAlertSink(ctx context.Context, name string) (AlertSink, error) {
	out, err := pgrun.CollectOne(ctx, s.reader(ctx), pgx.RowToStructByName[AlertSink], `SELECT `+sinkCols+` FROM alert_sinks WHERE name = $1`, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return AlertSink{}, sinkNotFound(name)
	}
	if err != nil {
		return AlertSink{}, fmt.Errorf("get alert sink %s: %w", name, err)
	}
	return out, nil
}

// ListAlertSinks returns every sink by name. Sinks are operator wiring, few
// by nature, so the list is not paginated.
func (s *Store) ListAlertSinks(ctx context.Context) ([]AlertSink, error) {
	out, err := pgrun.Collect(ctx, s.reader(ctx), pgx.RowToStructByName[AlertSink], `SELECT `+sinkCols+` FROM alert_sinks ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list alert sinks: %w", err)
	}
	if out == nil {
		out = []AlertSink{}
	}
	return out, nil
}

// DeleteAlertSink deletes the sink name and its undelivered alerts, or
// returns a *NotFoundError.
func (s *Store) DeleteAlertSink(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM alert_sinks WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("delete alert sink %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return sinkNotFound(name)
	}
	return nil
}

func sinkNotFound(name string) error {
	return &NotFoundError{Message: fmt.Sprintf("alert sink %q does not exist", name)}
}

// EmitAlert logs a pod-local alert (a breaker opened or closed, a kind
// parked) and queues it for the sinks that select it, in one transaction.
func (s *Store) EmitAlert(ctx context.Context, e AlertEvent) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `SELECT emit_alert($1, $2, $3, $4, $5::uuid, $6, $7, $8)::text`,
		e.Type, e.Endpoint, e.Kind, e.KindVersion, e.ResourceID, e.ResourceName, e.Source, e.Message).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("emit alert %s: %w", e.Type, err)
	}
	return id, nil
}

// ListAlertEvents returns the newest alert events, at most limit, newest
// first.
func (s *Store) ListAlertEvents(ctx context.Context, limit int) ([]AlertEvent, error) {
	out, err := pgrun.Collect(ctx, s.reader(ctx), pgx.RowToStructByName[AlertEvent], `SELECT `+alertEventCols+` FROM alert_events e ORDER BY at DESC, id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list alert events: %w", err)
	}
	if out == nil {
		out = []AlertEvent{}
	}
	return out, nil
}

const alertEventCols = `e.id::text AS id, e.at, e.type, e.endpoint, e.kind, e.kind_version, e.resource_id::text AS resource_id,
       e.resource_name, e.source, e.message`

// AlertDelivery is one (event, sink) the deliverer claimed: the event, the
// sink and its opened signing secret, and the attempts made before.
type AlertDelivery struct {
	Event    AlertEvent
	Sink     AlertSink
	Secret   EndpointSecret
	Attempts int
}

type alertDeliveryRow struct {
	AlertEvent
	SinkName   string   `db:"sink_name"`
	SinkType   string   `db:"sink_type"`
	SinkTarget string   `db:"sink_target"`
	SecretEnc  []byte   `db:"secret_enc"`
	Attempts   int      `db:"attempts"`
	EventTypes []string `db:"event_types"`
}

// ClaimAlertDeliveries leases up to limit due (event, sink) rows for lease
// and returns them, oldest event first. Rows another pod holds are skipped;
// a row whose lease lapsed (its pod died mid-delivery) is claimed again; the
// rows of a disabled sink wait until it is enabled again.
func (s *Store) ClaimAlertDeliveries(ctx context.Context, box *SecretBox, limit int, lease time.Duration) ([]AlertDelivery, error) {
	rows, err := pgrun.Collect(ctx, s.pool, pgx.RowToStructByName[alertDeliveryRow], `WITH c AS (
    SELECT o.event_id, o.sink_name FROM alert_outbox o JOIN alert_sinks s ON s.name = o.sink_name AND s.enabled
     WHERE o.not_before <= now() AND (o.lease_until IS NULL OR o.lease_until < now())
     ORDER BY o.not_before LIMIT $1 FOR UPDATE OF o SKIP LOCKED
), up AS (
    UPDATE alert_outbox o SET lease_until = now() + $2::interval FROM c
     WHERE o.event_id = c.event_id AND o.sink_name = c.sink_name
    RETURNING o.event_id, o.sink_name, o.attempts
)
SELECT `+alertEventCols+`, up.sink_name, up.attempts, s.type AS sink_type, s.target AS sink_target, s.secret_enc, s.event_types
  FROM up JOIN alert_events e ON e.id = up.event_id JOIN alert_sinks s ON s.name = up.sink_name
 ORDER BY e.at`, limit, lease)
	if err != nil {
		return nil, fmt.Errorf("claim alert deliveries: %w", err)
	}
	out := make([]AlertDelivery, 0, len(rows))
	for _, r := range rows {
		d := AlertDelivery{Event: r.AlertEvent, Attempts: r.Attempts,
			Sink: AlertSink{Name: r.SinkName, Type: r.SinkType, Target: r.SinkTarget, EventTypes: r.EventTypes}}
		if r.SecretEnc != nil {
			if box == nil {
				return nil, errors.New("claim alert deliveries: a webhook sink's secret needs the secret box (CONVERGE_SECRET_KEY)")
			}
			plain, err := box.Open(r.SecretEnc, []byte("alert-sink/"+r.SinkName))
			if err != nil {
				return nil, fmt.Errorf("open the secret of alert sink %s: %w", r.SinkName, err)
			}
			d.Secret = EndpointSecret(plain)
		}
		out = append(out, d)
	}
	return out, nil
}

// AckAlertDelivery deletes a delivered (event, sink) row.
func (s *Store) AckAlertDelivery(ctx context.Context, eventID, sink string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM alert_outbox WHERE event_id = $1 AND sink_name = $2`, eventID, sink); err != nil {
		return fmt.Errorf("ack alert %s for sink %s: %w", eventID, sink, err)
	}
	return nil
}

// FailAlertDelivery records a failed attempt and holds the row back until
// retryAt.
func (s *Store) FailAlertDelivery(ctx context.Context, eventID, sink, reason string, retryAt time.Time) error {
	if _, err := s.pool.Exec(ctx, `UPDATE alert_outbox SET attempts = attempts + 1, not_before = $3, lease_until = NULL, last_error = $4
 WHERE event_id = $1 AND sink_name = $2`, eventID, sink, retryAt, reason); err != nil {
		return fmt.Errorf("fail alert %s for sink %s: %w", eventID, sink, err)
	}
	return nil
}

// PruneAlertEvents deletes the alert events older than before that no sink
// still has to deliver, and returns how many went.
func (s *Store) PruneAlertEvents(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM alert_events e WHERE e.at < $1
   AND NOT EXISTS (SELECT 1 FROM alert_outbox o WHERE o.event_id = e.id)`, before)
	if err != nil {
		return 0, fmt.Errorf("prune alert events: %w", err)
	}
	return tag.RowsAffected(), nil
}

// upsertResult is what an INSERT ... ON CONFLICT DO UPDATE ... WHERE
// changed did, given whether the row existed before it: created, or
// configured when it updated the row, else unchanged.
func upsertResult(existed bool, tag pgconn.CommandTag) ApplyResult {
	switch {
	case !existed:
		return ApplyCreated
	case tag.RowsAffected() > 0:
		return ApplyConfigured
	}
	return ApplyUnchanged
}
