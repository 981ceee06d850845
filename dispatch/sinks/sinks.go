// Package sinks delivers alert events (store.AlertEvent: an endpoint
// disabled, a breaker opened or closed, a resource failed terminally, a kind
// parked by readiness) to the operator's alert sinks: a Standard-Webhooks-
// signed webhook, an Amazon EventBridge bus (PutEvents), an SNS topic
// (Publish) or an SQS queue (SendMessage).
//
// It works as the reactors' delivery does: the event and one alert_outbox
// row per sink that selects it are written in the transaction of the change
// (emit_alert, migrations/engine/alerts.sql), and a loop on every
// dispatching pod claims due rows under a lease (FOR UPDATE SKIP LOCKED, so
// pods share the work), delivers each, deletes it when the sink took it and
// otherwise backs it off exponentially, retrying without end while the sink
// exists. Delivery is at least once: a pod that dies after the sink took a
// message but before the delete delivers it again once the lease lapses.
// Every message carries the event's id as its dedup id: webhook-id on a
// webhook, MessageDeduplicationId on a FIFO queue or topic, and the
// converge-event-id message attribute on SNS and SQS and the detail's "id"
// on EventBridge.
package sinks

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/startstop"
	"github.com/convergeplane/converge/webhooksdk"
)

// Config tunes a Deliverer. Zero fields take the defaults.
type Config struct {
	// Box opens webhook sinks' signing secrets.
	Box *store.SecretBox
	// HTTP is the client webhooks are posted with (the dispatcher's egress
	// policy applies). Defaults to a client with Timeout.
	HTTP *http.Client
	// AWS returns the AWS configuration of the EventBridge, SNS and SQS
	// sinks. Defaults to config.LoadDefaultConfig.
	AWS func(context.Context) (aws.Config, error)
	// Interval is how often due alerts are looked for. Defaults to 1s.
	Interval time.Duration
	// Lease is how long a claimed alert is held before another pod may
	// deliver it again. Defaults to 1m.
	Lease time.Duration
	// Timeout bounds one delivery. Defaults to 10s.
	Timeout time.Duration
	// RetryBase and RetryMax bound the back-off after a failed delivery
	// (doubling per attempt). Default to 1s and 5m.
	RetryBase, RetryMax time.Duration
	// Retention is how long a delivered alert event is kept. Defaults to
	// 7 days.
	Retention time.Duration
	// Batch is how many alerts one pass claims. Defaults to 64.
	Batch int
	// UserAgent is sent with webhooks. Defaults to "converge-alerts".
	UserAgent string
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Metrics registers converge_alert_deliveries_total; nil registers
	// nothing.
	Metrics prometheus.Registerer
}

// Defaults for Config.
const (
	IntervalDefault  = time.Second
	LeaseDefault     = time.Minute
	TimeoutDefault   = 10 * time.Second
	RetryBaseDefault = time.Second
	RetryMaxDefault  = 5 * time.Minute
	RetentionDefault = 7 * 24 * time.Hour
	BatchDefault     = 64
)

func (c Config) withDefaults() Config {
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.Timeout = cmp.Or(c.Timeout, TimeoutDefault)
	c.RetryBase = cmp.Or(c.RetryBase, RetryBaseDefault)
	c.RetryMax = cmp.Or(c.RetryMax, RetryMaxDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.Batch = cmp.Or(c.Batch, BatchDefault)
	c.UserAgent = cmp.Or(c.UserAgent, "converge-alerts")
	if c.HTTP == nil {
		c.HTTP = &http.Client{Timeout: c.Timeout}
	}
	if c.AWS == nil {
		c.AWS = func(ctx context.Context) (aws.Config, error) { return config.LoadDefaultConfig(ctx) }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Deliverer is the loop that delivers alert events to their sinks.
type Deliverer struct {
	cfg        Config
	st         *store.Store
	loop       startstop.Loop
	aws        *aws.Config // loaded with the first AWS sink
	deliveries *prometheus.CounterVec
}

// New returns a Deliverer reading the outbox through st, or an error when
// its metric cannot be registered.
func New(cfg Config, st *store.Store) (*Deliverer, error) {
	d := &Deliverer{cfg: cfg.withDefaults(), st: st,
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Subsystem: "alert", Name: "deliveries_total",
			Help: "Alert deliveries to sinks by sink and result (ok, error); an error is retried with back-off.",
		}, []string{"sink", "result"})}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(d.deliveries); err != nil {
			return nil, fmt.Errorf("sinks: register metrics: %w", err)
		}
	}
	return d, nil
}

// Start runs the loop until Stop.
func (d *Deliverer) Start(ctx context.Context) error {
	d.loop.Start(ctx, d.run)
	return nil
}

// Stop stops the loop; a delivery in flight is cancelled, and its alert
// delivered again once its lease lapses.
func (d *Deliverer) Stop() { d.loop.Stop() }

// Running reports whether the loop runs (for /readyz).
func (d *Deliverer) Running() bool { return d.loop.Running() }

func (d *Deliverer) run(ctx context.Context) {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	var lastPrune time.Time
	for {
		for d.Pass(ctx) == d.cfg.Batch && ctx.Err() == nil {
			// a full batch: more may be due
		}
		if time.Since(lastPrune) > time.Hour {
			lastPrune = time.Now()
			if _, err := d.st.PruneAlertEvents(ctx, time.Now().Add(-d.cfg.Retention)); err != nil && ctx.Err() == nil {
				d.cfg.Logger.Error("cannot prune alert events", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass claims the due alerts, delivers them and records each outcome. It
// returns how many it claimed. The loop calls it; a test may call it
// instead of Start, never both at once.
func (d *Deliverer) Pass(ctx context.Context) int {
	batch, err := d.st.ClaimAlertDeliveries(ctx, d.cfg.Box, d.cfg.Batch, d.cfg.Lease)
	if err != nil {
		if ctx.Err() == nil {
			d.cfg.Logger.Error("cannot claim alerts", "err", err)
		}
		return 0
	}
	for _, a := range batch {
		dctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
		err := d.deliver(dctx, a)
		cancel()
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err == nil {
			d.deliveries.WithLabelValues(a.Sink.Name, "ok").Inc()
			err = d.st.AckAlertDelivery(wctx, a.Event.ID, a.Sink.Name)
		} else {
			d.deliveries.WithLabelValues(a.Sink.Name, "error").Inc()
			d.cfg.Logger.Warn("alert delivery failed", "sink", a.Sink.Name, "event", a.Event.ID, "type", a.Event.Type,
				"attempt", a.Attempts+1, "err", err)
			err = d.st.FailAlertDelivery(wctx, a.Event.ID, a.Sink.Name, err.Error(), time.Now().Add(d.backoff(a.Attempts)))
		}
		wcancel()
		if err != nil && ctx.Err() == nil {
			d.cfg.Logger.Error("cannot record an alert's delivery", "sink", a.Sink.Name, "event", a.Event.ID, "err", err)
		}
	}
	return len(batch)
}

// backoff is the wait after the attempts+1'th failure.
func (d *Deliverer) backoff(attempts int) time.Duration {
	return min(d.cfg.RetryBase<<min(attempts, 20), d.cfg.RetryMax)
}

func (d *Deliverer) deliver(ctx context.Context, a store.AlertDelivery) error {
	body, err := json.Marshal(a.Event)
	if err != nil {
		return err
	}
	switch a.Sink.Type {
	case store.SinkWebhook:
		return d.webhook(ctx, a, body)
	case store.SinkSQS:
		return d.sqs(ctx, a, body)
	case store.SinkSNS:
		return d.sns(ctx, a, body)
	case store.SinkEventBridge:
		return d.eventBridge(ctx, a, body)
	}
	return fmt.Errorf("unknown sink type %q", a.Sink.Type)
}

// webhook POSTs the event, signed as provider deliveries are (Standard
// Webhooks): webhook-id is the event id, the same on every redelivery.
func (d *Deliverer) webhook(ctx context.Context, a store.AlertDelivery, body []byte) error {
	signer, err := webhooksdk.NewSigner(a.Secret.Reveal())
	if err != nil {
		return fmt.Errorf("signing secret: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.Sink.Target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.cfg.UserAgent)
	signer.SetHeaders(req.Header, a.Event.ID, time.Now(), body)
	resp, err := d.cfg.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %d: %s", resp.StatusCode, strings.TrimSpace(string(excerpt)))
	}
	return nil
}

// fifoGroup is the message group of FIFO queues and topics: one group, so
// an operator reads the alerts in the order they were logged.
const fifoGroup = "converge-alerts"

func (d *Deliverer) awsConfig(ctx context.Context) (aws.Config, error) {
	if d.aws == nil {
		c, err := d.cfg.AWS(ctx)
		if err != nil {
			return aws.Config{}, fmt.Errorf("AWS configuration: %w", err)
		}
		d.aws = &c
	}
	return *d.aws, nil
}

func (d *Deliverer) sqs(ctx context.Context, a store.AlertDelivery, body []byte) error {
	c, err := d.awsConfig(ctx)
	if err != nil {
		return err
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(a.Sink.Target), MessageBody: aws.String(string(body)),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			"converge-event-id":   {DataType: aws.String("String"), StringValue: aws.String(a.Event.ID)},
			"converge-event-type": {DataType: aws.String("String"), StringValue: aws.String(a.Event.Type)},
		}}
	if strings.HasSuffix(a.Sink.Target, ".fifo") {
		in.MessageDeduplicationId, in.MessageGroupId = aws.String(a.Event.ID), aws.String(fifoGroup)
	}
	_, err = sqs.NewFromConfig(c).SendMessage(ctx, in)
	return err
}

func (d *Deliverer) sns(ctx context.Context, a store.AlertDelivery, body []byte) error {
	c, err := d.awsConfig(ctx)
	if err != nil {
		return err
	}
	in := &sns.PublishInput{TopicArn: aws.String(a.Sink.Target), Message: aws.String(string(body)),
		Subject: aws.String(subject(a.Event)),
		MessageAttributes: map[string]snstypes.MessageAttributeValue{
			"converge-event-id":   {DataType: aws.String("String"), StringValue: aws.String(a.Event.ID)},
			"converge-event-type": {DataType: aws.String("String"), StringValue: aws.String(a.Event.Type)},
		}}
	if strings.HasSuffix(a.Sink.Target, ".fifo") {
		in.MessageDeduplicationId, in.MessageGroupId = aws.String(a.Event.ID), aws.String(fifoGroup)
		in.Subject = nil // FIFO topics take no subject
	}
	_, err = sns.NewFromConfig(c).Publish(ctx, in)
	return err
}

// subject is an SNS email's subject line (at most 100 characters).
func subject(e store.AlertEvent) string {
	s := "converge " + e.Type
	for _, w := range []string{e.Endpoint, e.Kind, e.ResourceName} {
		if w != "" {
			s += " " + w
		}
	}
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}

// EventBridgeSource is the Source of the events put on an EventBridge bus;
// a rule matches it with {"source": ["converge"]}.
const EventBridgeSource = "converge"

func (d *Deliverer) eventBridge(ctx context.Context, a store.AlertDelivery, body []byte) error {
	c, err := d.awsConfig(ctx)
	if err != nil {
		return err
	}
	out, err := eventbridge.NewFromConfig(c).PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
		EventBusName: aws.String(a.Sink.Target), Source: aws.String(EventBridgeSource),
		DetailType: aws.String(a.Event.Type), Detail: aws.String(string(body)), Time: aws.Time(a.Event.At),
	}}})
	if err != nil {
		return err
	}
	if out.FailedEntryCount > 0 {
		for _, e := range out.Entries {
			if e.ErrorCode != nil {
				return fmt.Errorf("eventbridge refused the event: %s: %s", aws.ToString(e.ErrorCode), aws.ToString(e.ErrorMessage))
			}
		}
		return errors.New("eventbridge refused the event")
	}
	return nil
}
