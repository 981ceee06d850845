package api_test

import (
	"net/http"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// TestAlertSinks: the sinks' lifecycle over HTTP (a webhook sink's secret
// shown once, never by a GET), refusals naming the field, and the alert
// events list.
func TestAlertSinks(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Endpoints: endpointsConfig(t)})
	post := func(body string) response {
		b.t.Helper()
		return b.do(http.MethodPost, "/api/v1/alert-sinks", body)
	}

	t.Run("Lifecycle", func(t *testing.T) {
		var got struct {
			Name       string   `json:"name"`
			SinkType   string   `json:"sink_type"`
			EventTypes []string `json:"event_types"`
			Kinds      []string `json:"kinds"`
			Enabled    bool     `json:"enabled"`
			Secret     string   `json:"secret"`
		}
		const body = `{"name":"oncall","sink_type":"webhook","target":"https://hooks.example/converge","event_types":["endpoint.disabled","resource.failed"]}`
		post(body).wantApply(t, "created").decode(t, &got)
		if got.Secret == "" || got.SinkType != "webhook" || !got.Enabled || got.Kinds == nil || len(got.EventTypes) != 2 {
			t.Fatalf("created %+v, want an enabled webhook sink, its secret, and kinds []", got)
		}
		got.Secret = ""
		post(body).wantApply(t, "unchanged").decode(t, &got)
		if got.Secret != "" {
			t.Error("an unchanged apply showed the secret again")
		}
		post(`{"name":"oncall","sink_type":"webhook","target":"https://hooks.example/converge","event_types":["kind.parked"],"kinds":["vpc"]}`).
			wantApply(t, "configured")
		got.Secret = ""
		b.do(http.MethodGet, "/api/v1/alert-sinks/oncall", nil).want(t, http.StatusOK).decode(t, &got)
		if got.Secret != "" || len(got.Kinds) != 1 || got.EventTypes[0] != "kind.parked" {
			t.Fatalf("GET %+v, want the configured sink and no secret", got)
		}
		got.Secret = ""
		post(`{"name":"queue","sink_type":"sqs","target":"https://sqs.eu-west-1.amazonaws.com/123456789012/alerts.fifo","event_types":["breaker.opened"]}`).
			wantApply(t, "created").decode(t, &got)
		if got.Secret != "" {
			t.Error("an SQS sink got a signing secret")
		}
		var l struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
		}
		b.do(http.MethodGet, "/api/v1/alert-sinks", nil).want(t, http.StatusOK).decode(t, &l)
		if len(l.Items) != 2 || l.Items[0].Name != "oncall" || l.Items[1].Name != "queue" {
			t.Fatalf("list %+v", l)
		}
		b.do(http.MethodDelete, "/api/v1/alert-sinks/queue", nil).want(t, http.StatusNoContent)
		b.do(http.MethodGet, "/api/v1/alert-sinks/queue", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodDelete, "/api/v1/alert-sinks/queue", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodGet, "/api/v1/alert-events?limit=5", nil).want(t, http.StatusOK).decode(t, &l)
		if l.Items == nil {
			t.Error("alert events: items is null, want []")
		}
	})

	t.Run("Refused", func(t *testing.T) {
		for _, tc := range []struct {
			name, body, loc string
			status          int
		}{
			{"SinkType", `{"name":"x","sink_type":"pager","target":"https://a.example","event_types":["kind.parked"]}`, "body.sink_type", 422},
			{"EventType", `{"name":"x","sink_type":"webhook","target":"https://a.example","event_types":["kind.parked","exploded"]}`, "body.event_types[1]", 422},
			{"NoEventTypes", `{"name":"x","sink_type":"webhook","target":"https://a.example","event_types":[]}`, "body.event_types", 422},
			{"Kind", `{"name":"x","sink_type":"webhook","target":"https://a.example","event_types":["kind.parked"],"kinds":["Not A Kind"]}`, "body.kinds[0]", 422},
			{"SNSTarget", `{"name":"x","sink_type":"sns","target":"https://sns.example","event_types":["kind.parked"]}`, "body.target", 422},
			{"SQSTarget", `{"name":"x","sink_type":"sqs","target":"alerts","event_types":["kind.parked"]}`, "body.target", 422},
			{"WebhookEgress", `{"name":"x","sink_type":"webhook","target":"ftp://a.example","event_types":["kind.parked"]}`, "body.target", 422},
			{"SecretOnSQS", `{"name":"x","sink_type":"sqs","target":"https://sqs.example/1/q","event_types":["kind.parked"],"secret":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, "body.secret", 422},
			{"BadName", `{"name":"no spaces","sink_type":"webhook","target":"https://a.example","event_types":["kind.parked"]}`, "body.name", 422},
			{"Unknown", `{"name":"x","sink_type":"webhook","target":"https://a.example","event_types":["kind.parked"],"topic":"t"}`, "body", 400},
		} {
			t.Run(tc.name, func(t *testing.T) {
				post(tc.body).wantProblem(t, tc.status, tc.loc)
			})
		}
		if n := b.count(`SELECT count(*) FROM alert_sinks WHERE name = 'x'`); n != 0 {
			t.Errorf("%d sinks after refused applies", n)
		}
	})
}
