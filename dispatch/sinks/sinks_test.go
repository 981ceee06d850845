package sinks_test

import (
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/sinks"
	"github.com/convergeplane/converge/internal/testkit/awstest"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// queue creates an SQS queue and returns its URL and ARN.
func queue(t *testing.T, c *sqs.Client, name string) (string, string) {
	t.Helper()
	attrs := map[string]string{}
	if strings.HasSuffix(name, ".fifo") {
		attrs["FifoQueue"] = "true"
	}
	q, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	must(t, err)
	a, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	must(t, err)
	return *q.QueueUrl, a.Attributes["QueueArn"]
}

// receive waits for one message on the queue.
func receive(t *testing.T, c *sqs.Client, url string) sqstypes.Message {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1,
			MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}})
		must(t, err)
		if len(out.Messages) > 1 {
			t.Fatalf("%s: %d messages, want one", url, len(out.Messages))
		}
		if len(out.Messages) == 1 {
			return out.Messages[0]
		}
	}
	t.Fatalf("no message on %s", url)
	return sqstypes.Message{}
}

// TestAWSSinks: an endpoint disabled for real reaches an SQS queue, a FIFO
// queue (MessageDeduplicationId = the event id), an SNS topic (read from an
// SQS queue subscribed to it) and an EventBridge bus (read from an SQS queue
// a rule on the bus targets), each carrying the event id; a sink whose
// queue does not exist yet fails, backs off, and delivers the same event
// once the queue is there. Disabling the endpoint again logs nothing.
func TestAWSSinks(t *testing.T) {
	awstest.Start(t)
	ctx := t.Context()
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})
	key := make([]byte, store.SecretKeyBytes)
	_, _ = rand.Read(key)
	box, err := store.NewSecretBox(key)
	must(t, err)

	cfg, err := config.LoadDefaultConfig(ctx)
	must(t, err)
	sq, sn, eb := sqs.NewFromConfig(cfg), sns.NewFromConfig(cfg), eventbridge.NewFromConfig(cfg)
	stdURL, _ := queue(t, sq, "alerts")
	fifoURL, _ := queue(t, sq, "alerts.fifo")
	fromSNS, fromSNSArn := queue(t, sq, "from-sns")
	fromEB, fromEBArn := queue(t, sq, "from-eventbridge")
	topic, err := sn.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("alerts")})
	must(t, err)
	_, err = sn.Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("sqs"), Endpoint: aws.String(fromSNSArn),
		Attributes: map[string]string{"RawMessageDelivery": "true"}})
	must(t, err)
	_, err = eb.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String("alerts")})
	must(t, err)
	_, err = eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String("converge"), EventBusName: aws.String("alerts"),
		EventPattern: aws.String(`{"source":["` + sinks.EventBridgeSource + `"]}`)})
	must(t, err)
	_, err = eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String("converge"), EventBusName: aws.String("alerts"),
		Targets: []ebtypes.Target{{Id: aws.String("q"), Arn: aws.String(fromEBArn)}}})
	must(t, err)
	lateURL := strings.Replace(stdURL, "/alerts", "/late", 1)

	for _, s := range []store.PutAlertSinkParams{
		{Name: "sqs", Type: store.SinkSQS, Target: stdURL},
		{Name: "sqs-fifo", Type: store.SinkSQS, Target: fifoURL},
		{Name: "sns", Type: store.SinkSNS, Target: *topic.TopicArn},
		{Name: "eventbridge", Type: store.SinkEventBridge, Target: "alerts"},
		{Name: "late", Type: store.SinkSQS, Target: lateURL},
	} {
		s.EventTypes, s.Enabled = []string{store.AlertEndpointDisabled}, true
		_, _, _, err := st.PutAlertSink(ctx, box, s)
		must(t, err)
	}
	_, _, err = st.CreateEndpoint(ctx, box, store.PutEndpointParams{Name: "gone",
		Kinds:  []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "https://provider.example/converge"}})
	must(t, err)
	must(t, st.DisableEndpoint(ctx, "gone", "its target answered 410 Gone"))
	must(t, st.DisableEndpoint(ctx, "gone", "its target answered 410 Gone")) // already off: no new alert
	events, err := st.ListAlertEvents(ctx, 10)
	must(t, err)
	if len(events) != 1 || events[0].Type != store.AlertEndpointDisabled || events[0].Endpoint != "gone" {
		t.Fatalf("alert events = %+v, want one endpoint.disabled of gone", events)
	}
	id := events[0].ID

	metrics := prometheus.NewRegistry()
	d, err := sinks.New(sinks.Config{Box: box, Interval: 20 * time.Millisecond, RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)), Metrics: metrics}, st)
	must(t, err)
	must(t, d.Start(ctx))
	t.Cleanup(d.Stop)

	checkBody := func(where, body string) {
		t.Helper()
		var ev store.AlertEvent
		if err := json.Unmarshal([]byte(body), &ev); err != nil || ev.ID != id || ev.Type != store.AlertEndpointDisabled || ev.Endpoint != "gone" {
			t.Errorf("%s: body %s, want the event %s", where, body, id)
		}
	}
	checkAttr := func(where string, m sqstypes.Message) {
		t.Helper()
		if a, ok := m.MessageAttributes["converge-event-id"]; !ok || aws.ToString(a.StringValue) != id {
			t.Errorf("%s: converge-event-id = %v, want %s", where, m.MessageAttributes, id)
		}
	}
	m := receive(t, sq, stdURL)
	checkBody("sqs", aws.ToString(m.Body))
	checkAttr("sqs", m)
	m = receive(t, sq, fifoURL)
	checkBody("sqs fifo", aws.ToString(m.Body))
	if got := m.Attributes["MessageDeduplicationId"]; got != id {
		t.Errorf("fifo MessageDeduplicationId = %q, want the event id %s", got, id)
	}
	m = receive(t, sq, fromSNS)
	checkBody("sns", aws.ToString(m.Body))
	checkAttr("sns", m)
	m = receive(t, sq, fromEB)
	var put struct {
		Source     string          `json:"source"`
		DetailType string          `json:"detail-type"`
		Detail     json.RawMessage `json:"detail"`
	}
	must(t, json.Unmarshal([]byte(aws.ToString(m.Body)), &put))
	if put.Source != sinks.EventBridgeSource || put.DetailType != store.AlertEndpointDisabled {
		t.Errorf("eventbridge event %s, want source %s and detail-type %s", aws.ToString(m.Body), sinks.EventBridgeSource, store.AlertEndpointDisabled)
	}
	checkBody("eventbridge", string(put.Detail))

	// The late queue does not exist: the sink fails, and is retried.
	var attempts int
	deadline := time.Now().Add(30 * time.Second)
	for attempts < 2 && time.Now().Before(deadline) {
		must(t, db.Pool.QueryRow(ctx, `SELECT coalesce(max(attempts), 0) FROM alert_outbox WHERE sink_name = 'late'`).Scan(&attempts))
		time.Sleep(20 * time.Millisecond)
	}
	if attempts < 2 {
		t.Fatalf("the late sink made %d failed attempts, want 2 before its queue exists", attempts)
	}
	queue(t, sq, "late")
	m = receive(t, sq, lateURL)
	checkBody("late sqs", aws.ToString(m.Body))
	checkAttr("late sqs", m)
	deadline = time.Now().Add(10 * time.Second)
	n := -1
	for n != 0 && time.Now().Before(deadline) {
		must(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM alert_outbox`).Scan(&n))
		time.Sleep(20 * time.Millisecond)
	}
	if n != 0 {
		t.Errorf("%d alerts still queued after every sink took its own", n)
	}
	got := map[string]float64{}
	families, err := metrics.Gather()
	must(t, err)
	for _, f := range families {
		if f.GetName() != "converge_alert_deliveries_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[l["sink"]+"/"+l["result"]] = m.GetCounter().GetValue()
		}
	}
	if got["sqs/ok"] != 1 || got["late/ok"] != 1 || got["late/error"] < 2 || got["sns/ok"] != 1 {
		t.Errorf("converge_alert_deliveries_total = %v, want one ok per sink and the late sink's errors", got)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestLeaseLapseRedelivers: an alert claimed by a pod that never reports
// back (it died mid-delivery) is not claimed by another while the lease
// holds, and is claimed again, the same event, once it lapses; not while
// its sink is disabled.
func TestLeaseLapseRedelivers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})
	_, _, _, err := st.PutAlertSink(ctx, nil, store.PutAlertSinkParams{Name: "q", Type: store.SinkSQS,
		Target: "https://sqs.eu-west-1.amazonaws.com/123456789012/alerts", EventTypes: []string{store.AlertBreakerOpened}, Enabled: true})
	must(t, err)
	id, err := st.EmitAlert(ctx, store.AlertEvent{Type: store.AlertBreakerOpened, Endpoint: "ep", Source: "pod-a", Message: "opened"})
	must(t, err)
	const lease = 300 * time.Millisecond
	claimedAt := time.Now() // before: the lease runs from the claim's own clock, a moment later
	first, err := st.ClaimAlertDeliveries(ctx, nil, 10, lease)
	must(t, err)
	if len(first) != 1 || first[0].Event.ID != id || first[0].Sink.Name != "q" {
		t.Fatalf("first claim = %+v, want the event %s for q", first, id)
	}
	var again []store.AlertDelivery
	for len(again) == 0 {
		again, err = st.ClaimAlertDeliveries(ctx, nil, 10, lease)
		must(t, err)
		if len(again) == 0 && time.Since(claimedAt) > 30*time.Second {
			t.Fatal("the lapsed alert was never claimed again")
		}
	}
	if elapsed := time.Since(claimedAt); elapsed < lease {
		t.Errorf("claimed again after %s, inside its %s lease", elapsed, lease)
	}
	if again[0].Event.ID != id {
		t.Errorf("claimed again %+v, want the same event %s", again, id)
	}

	// A disabled sink's alerts wait for it.
	_, _, _, err = st.PutAlertSink(ctx, nil, store.PutAlertSinkParams{Name: "q", Type: store.SinkSQS,
		Target: "https://sqs.eu-west-1.amazonaws.com/123456789012/alerts", EventTypes: []string{store.AlertBreakerOpened}, Enabled: false})
	must(t, err)
	must(t, st.FailAlertDelivery(ctx, id, "q", "test", time.Now()))
	if got, err := st.ClaimAlertDeliveries(ctx, nil, 10, lease); err != nil || len(got) != 0 {
		t.Errorf("claim with the sink disabled = %+v, %v; want nothing", got, err)
	}
}
