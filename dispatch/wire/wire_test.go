package wire_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/wire"
	"github.com/convergeplane/converge/webhooksdk"
)

const taskID = "0b7f6a0e-3c1d-4a55-9f43-2f6f2c1f9a10"

func TestMessageID(t *testing.T) {
	t.Parallel()
	a := wire.MessageID(model.Task{ID: taskID, Epoch: 7})
	if a != "msg_"+taskID+"_7" {
		t.Errorf("MessageID = %q", a)
	}
	if b := wire.MessageID(model.Task{ID: taskID, Epoch: 8}); a == b {
		t.Error("a new claim kept the webhook-id")
	}
}

func TestEnvelope(t *testing.T) {
	t.Parallel()
	dl := time.Date(2026, 1, 1, 0, 5, 0, 0, time.FixedZone("x", 3600))
	req := model.Request{TaskID: taskID, ClaimEpoch: 7, Attempt: 2, TaskType: model.TaskOperate, Reaction: "resize",
		Trigger: model.TriggerOperation, Kind: "vpc", KindVersion: 1,
		Resource:  model.Resource{ID: "r1", Kind: "vpc", KindVersion: 1, Name: "blue", Labels: map[string]string{"team": "blue"}, Spec: json.RawMessage(`{"a":1}`), Generation: 3, Phase: model.PhaseReady},
		Observed:  []model.Resource{{ID: "c1", Kind: "subnet", KindVersion: 1, Name: "c1"}},
		Operation: &model.Operation{Verb: "resize", Input: json.RawMessage(`{"to":2}`)},
		Config:    json.RawMessage(`{"x":1}`), Bundle: []byte{1}, Deadline: &dl}
	cb := &webhooksdk.Callback{URL: "https://d/v1/tasks/" + taskID + "/outcome", Token: "t"}
	got := wire.Envelope(&req, cb)
	want := webhooksdk.Envelope{Type: "task", TaskID: taskID, ClaimEpoch: 7, Attempt: 2, TaskType: "operate", Reaction: "resize",
		Trigger: "operation", Kind: "vpc", KindVersion: 1,
		Resource:  &webhooksdk.Resource{ID: "r1", Kind: "vpc", KindVersion: 1, Name: "blue", Labels: map[string]string{"team": "blue"}, Spec: json.RawMessage(`{"a":1}`), Generation: 3, Phase: "Ready"},
		Observed:  []webhooksdk.Resource{{ID: "c1", Kind: "subnet", KindVersion: 1, Name: "c1"}},
		Operation: &webhooksdk.Operation{Verb: "resize", Input: json.RawMessage(`{"to":2}`)},
		Config:    json.RawMessage(`{"x":1}`), Bundle: []byte{1}, Deadline: dl.UTC(), Callback: cb}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("envelope (-want +got):\n%s", d)
	}
	b, _ := json.Marshal(got)
	var back map[string]any
	_ = json.Unmarshal(b, &back)
	if back["deadline"] != "2025-12-31T23:05:00Z" {
		t.Errorf("deadline on the wire = %v, want RFC 3339 UTC", back["deadline"])
	}
}

func TestDecodeResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want model.Result
		bad  bool
	}{
		{"outcome", `{"task_id":"` + taskID + `","claim_epoch":7,"outcome":{"status":{"ok":true},
			"conditions":[{"type":"Ready","status":"True"}],
			"children":[{"kind":"subnet","kind_version":1,"name":"a","spec":{}}],
			"edges":[{"dependent":{"kind":"subnet","name":"a"},"dependency":{"kind":"vpc","name":"v"},"values":[{"dependent_field":"/vpc_id","source_field":"/id"}]}],
			"configs":[{"name":"c","kind":"subnet","kind_version":1,"spec":{}}],"side_effect_done":true}}`,
			model.Result{Outcome: &model.Outcome{Status: json.RawMessage(`{"ok":true}`),
				Conditions:     []model.Condition{{Type: "Ready", Status: "True"}},
				Children:       []model.Child{{Kind: "subnet", KindVersion: 1, Name: "a", Spec: json.RawMessage(`{}`)}},
				Edges:          []model.Edge{{Dependent: model.Ref{Kind: "subnet", Name: "a"}, Dependency: model.Ref{Kind: "vpc", Name: "v"}, Values: []model.ValueFlow{{DependentField: "/vpc_id", SourceField: "/id"}}}},
				Configs:        []model.ConfigSpec{{Name: "c", Kind: "subnet", KindVersion: 1, Spec: json.RawMessage(`{}`)}},
				SideEffectDone: true}}, false},
		{"ids may be omitted", `{"outcome":{}}`, model.Result{Outcome: &model.Outcome{}}, false},
		{"transient error", `{"error":{"message":"nope"}}`, model.Result{Error: &model.TaskError{Message: "nope"}}, false},
		{"terminal error", `{"error":{"message":"bad spec","terminal":true}}`, model.Result{Error: &model.TaskError{Message: "bad spec", Terminal: true}}, false},
		{"neither", `{"task_id":"` + taskID + `"}`, model.Result{}, true},
		{"both", `{"outcome":{},"error":{"message":"x"}}`, model.Result{}, true},
		{"null outcome", `{"outcome":null}`, model.Result{}, true},
		{"another task", `{"task_id":"other","outcome":{}}`, model.Result{}, true},
		{"another claim", `{"claim_epoch":6,"outcome":{}}`, model.Result{}, true},
		{"not json", `<html>`, model.Result{}, true},
		{"empty", ``, model.Result{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := wire.DecodeResult([]byte(tc.body), taskID, 7)
			if tc.bad {
				if !errors.Is(err, wire.ErrMalformedResult) {
					t.Fatalf("err = %v, want ErrMalformedResult", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("result (-want +got):\n%s", d)
			}
		})
	}
}
