package protocol_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/convergeplane/converge/protocol"
)

func loadSchemas(t *testing.T) *protocol.Schemas {
	t.Helper()
	s, err := protocol.LoadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSchemasCompile: every file of schema/ compiles, and each message name the package
// declares has its schema.
func TestSchemasCompile(t *testing.T) {
	t.Parallel()
	s := loadSchemas(t)
	for _, name := range []string{protocol.SchemaEnvelope, protocol.SchemaPayload, protocol.SchemaBatchRequest,
		protocol.SchemaBatchResponse, protocol.SchemaHealthRequest, protocol.SchemaHealth, protocol.SchemaResult,
		protocol.SchemaCallbackAnswer, protocol.SchemaCallbackBatch, protocol.SchemaCallbackBatchAnswer,
		protocol.SchemaHeartbeat, protocol.SchemaHeartbeatAnswer, protocol.SchemaProblem,
		protocol.SchemaLambdaInvokeEvent, protocol.SchemaFunctionURLEvent, protocol.SchemaLambdaResponse} {
		if err := s.Validate(name, []byte(`{}`)); err != nil && strings.Contains(err.Error(), "no schema") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := len(s.Names()); got != 16 {
		t.Errorf("%d schemas: %v; a new one needs its name here", got, s.Names())
	}
}

// TestVectorsValidate checks every message of every conformance vector against its
// schema: the requests, which the dispatcher's own code built and signed, validate —
// except the envelopes a vector has the SDK refuse with 400, which must not; the Lambda
// events; the answers the SDK must give; its outgoing calls and the control plane's
// scripted answers.
func TestVectorsValidate(t *testing.T) {
	t.Parallel()
	s := loadSchemas(t)
	vs, err := protocol.Vectors()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			var body []byte
			if v.Request.Body != nil {
				body = []byte(*v.Request.Body)
			}
			if v.Request.Event != nil {
				var ev struct {
					Version         string
					Body            string
					IsBase64Encoded bool
				}
				if err := json.Unmarshal(v.Request.Event, &ev); err != nil {
					t.Fatal(err)
				}
				schema := protocol.SchemaLambdaInvokeEvent
				if ev.Version == "2.0" {
					schema = protocol.SchemaFunctionURLEvent
				}
				valid(t, s, schema, v.Request.Event)
				body = []byte(ev.Body)
				if ev.IsBase64Encoded {
					if body, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
						t.Fatal(err)
					}
				}
			}
			reqSchema, ansSchema := protocol.DeliverySchemas(body)
			switch {
			case v.Request.Method == http.MethodGet:
			case v.Expect.Status == http.StatusBadRequest:
				if reqSchema != "" && s.Validate(reqSchema, body) == nil {
					t.Errorf("the SDK must refuse this envelope (400), but it validates against %s: %s", reqSchema, body)
				}
			case reqSchema == "":
				t.Errorf("the request has no known type: %s", body)
			default:
				valid(t, s, reqSchema, body)
			}
			if v.Expect.Body != nil && v.Expect.Status == http.StatusOK {
				valid(t, s, ansSchema, v.Expect.Body)
			}
			for _, c := range v.Outgoing {
				callSchema, answerSchema := protocol.CallSchemas(c.Method, c.URL)
				if c.Body != nil {
					valid(t, s, callSchema, c.Body)
				}
				switch {
				case c.Answer.Status == http.StatusOK:
					valid(t, s, answerSchema, []byte(c.Answer.Body))
				case c.Answer.Status >= 400:
					valid(t, s, protocol.SchemaProblem, []byte(c.Answer.Body))
				}
			}
		})
	}
}

func valid(t *testing.T, s *protocol.Schemas, schema string, doc []byte) {
	t.Helper()
	if err := s.Validate(schema, doc); err != nil {
		t.Errorf("%v\n%s", err, doc)
	}
}

// TestSchemasRefuse: documents the protocol forbids fail their schema, so a schema
// that accepted anything would fail here.
func TestSchemasRefuse(t *testing.T) {
	t.Parallel()
	s := loadSchemas(t)
	const env = `"type":"task","task_id":"t","claim_epoch":7,"attempt":1,"task_type":"reconcile","reaction":"work","trigger":"specChange","kind":"vpc","kind_version":1`
	const res = `"resource":{"id":"5d0c2b1e-8f3a-4c7e-b1d2-9a6e4f3c2b10","kind":"vpc","kind_version":1,"name":"n","labels":{},"spec":{},"generation":1,"phase":"Ready"}`
	const cb = `"callback":{"url":"https://d/v1/tasks/t/outcome","token":"x"}`
	tests := []struct {
		schema, doc string
		ok          bool
	}{
		{protocol.SchemaEnvelope, `{` + env + `,` + res + `,` + cb + `}`, true},
		{protocol.SchemaEnvelope, `{` + env + `,` + cb + `,"payload_url":"https://d/v1/tasks/t"}`, true},
		{protocol.SchemaEnvelope, `{` + env + `,` + res + `,` + cb + `,"payload_url":"https://d/v1/tasks/t"}`, false}, // thin with a document
		{protocol.SchemaEnvelope, `{` + env + `,` + res + `}`, false},                                                 // no callback
		{protocol.SchemaEnvelope, `{` + env + `,` + cb + `}`, false},                                                  // neither resource nor payload_url
		{protocol.SchemaEnvelope, `{` + strings.Replace(env, `"kind_version":1`, `"kind_version":0`, 1) + `,` + res + `,` + cb + `}`, false},
		{protocol.SchemaEnvelope, `{` + strings.Replace(env, `"claim_epoch":7`, `"claim_epoch":0`, 1) + `,` + res + `,` + cb + `}`, false},
		{protocol.SchemaPayload, `{` + env + `,` + res + `}`, true},
		{protocol.SchemaPayload, `{` + env + `,` + res + `,` + cb + `}`, false},
		{protocol.SchemaResult, `{"task_id":"t","claim_epoch":7,"outcome":{}}`, true},
		{protocol.SchemaResult, `{"task_id":"t","error":{"message":"m","terminal":true},"outcome":null}`, true},
		{protocol.SchemaResult, `{"task_id":"t","claim_epoch":7}`, false},                                              // neither
		{protocol.SchemaResult, `{"task_id":"t","claim_epoch":7,"outcome":{},"error":{"message":"m"}}`, false},         // both
		{protocol.SchemaResult, `{"task_id":"t","claim_epoch":0,"outcome":{}}`, false},                                 // epoch 0
		{protocol.SchemaResult, `{"outcome":{"children":[{"kind":"k","kind_version":0,"name":"n"}]}}`, false},          // no implicit v1
		{protocol.SchemaResult, `{"outcome":{"conditions":[{"type":"Ready","status":"yes"}]}}`, false},                 // status
		{protocol.SchemaResult, `{"outcome":{"configs":[{"name":"c","kind":"k","kind_version":1,"spec":[]}]}}`, false}, // spec not an object
		{protocol.SchemaBatchRequest, `{"type":"batch","tasks":[{` + env + `,` + res + `,` + cb + `}]}`, false},        // a batch of one
		{protocol.SchemaBatchResponse, `{"type":"batch","results":[{"task_id":"t","accepted":true}]}`, true},
		{protocol.SchemaBatchResponse, `{"type":"batch","results":[{"task_id":"t","accepted":true,"outcome":{}}]}`, false},
		{protocol.SchemaBatchResponse, `{"type":"batch","results":[{"outcome":{}}]}`, false}, // no task_id
		{protocol.SchemaHealth, `{"kinds":[{"kind":"vpc","kind_version":1}]}`, false},
		{protocol.SchemaCallbackBatchAnswer, `{"results":[{"task_id":"t","status":200}]}`, false},
		{protocol.SchemaHeartbeat, `{"claim_epoch":0}`, false},
		{protocol.SchemaLambdaInvokeEvent, `{"version":"converge.v1","rawPath":"/","headers":{"content-type":"application/json","webhook-id":"m","webhook-timestamp":"0123","webhook-signature":"v1,AA=="},"body":"{}","isBase64Encoded":false}`, false},
	}
	for _, tt := range tests {
		err := s.Validate(tt.schema, []byte(tt.doc))
		if (err == nil) != tt.ok {
			t.Errorf("%s %s: valid=%v, want %v (%v)", tt.schema, tt.doc, err == nil, tt.ok, err)
		}
	}
}
