package wire_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/wire"
	"github.com/convergeplane/converge/webhooksdk"
)

const taskID = "0b7f6a0e-3c1d-4a55-9f43-2f6f2c1f9a10"

func TestMessageID(t *testing.T) {
	t.Parallel()
	a := wire.MessageID(model.Task{ID: taskID, ClaimEpoch: 7})
	if a != "msg_"+taskID+"_7" {
		t.Errorf("MessageID = %q", a)
	}
	if b := wire.MessageID(model.Task{ID: taskID, ClaimEpoch: 8}); a == b {
		t.Error("a new claim kept the webhook-id")
	}
}

func TestDecodeResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want webhooksdk.Result
		bad  bool
	}{
		{"outcome", `{"task_id":"` + taskID + `","claim_epoch":7,"outcome":{"status":{"ok":true},
			"conditions":[{"type":"Ready","status":"True"}],
			"children":[{"kind":"subnet","kind_version":1,"name":"a","spec":{}}],
			"edges":[{"dependent":{"kind":"subnet","name":"a"},"dependency":{"kind":"vpc","name":"v"},"values":[{"dependent_field":"/vpc_id","source_field":"/id"}]}],
			"configs":[{"name":"c","kind":"subnet","kind_version":1,"is_default":true,"spec":{"n":9007199254740993}}],"side_effect_done":true}}`,
			webhooksdk.Result{TaskID: taskID, ClaimEpoch: 7, Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{"ok":true}`),
				Conditions:     []webhooksdk.Condition{{Type: "Ready", Status: "True"}},
				Children:       []webhooksdk.Child{{Kind: "subnet", KindVersion: 1, Name: "a", Spec: json.RawMessage(`{}`)}},
				Edges:          []webhooksdk.Edge{{Dependent: webhooksdk.Ref{Kind: "subnet", Name: "a"}, Dependency: webhooksdk.Ref{Kind: "vpc", Name: "v"}, Values: []webhooksdk.ValueFlow{{DependentField: "/vpc_id", SourceField: "/id"}}}},
				Configs:        []webhooksdk.Config{{Name: "c", Kind: "subnet", KindVersion: 1, IsDefault: true, Spec: json.RawMessage(`{"n":9007199254740993}`)}},
				SideEffectDone: true}}, false},
		{"ids may be omitted", `{"outcome":{}}`, webhooksdk.Result{Outcome: &webhooksdk.Outcome{}}, false},
		{"transient error", `{"error":{"message":"nope"}}`, webhooksdk.Result{Error: &webhooksdk.Error{Message: "nope"}}, false},
		{"terminal error", `{"error":{"message":"bad spec","terminal":true}}`, webhooksdk.Result{Error: &webhooksdk.Error{Message: "bad spec", Terminal: true}}, false},
		{"neither", `{"task_id":"` + taskID + `"}`, webhooksdk.Result{}, true},
		{"both", `{"outcome":{},"error":{"message":"x"}}`, webhooksdk.Result{}, true},
		{"null outcome", `{"outcome":null}`, webhooksdk.Result{}, true},
		{"another task", `{"task_id":"other","outcome":{}}`, webhooksdk.Result{}, true},
		{"another claim", `{"claim_epoch":6,"outcome":{}}`, webhooksdk.Result{}, true},
		{"claim 0 is another claim", `{"claim_epoch":0,"outcome":{}}`, webhooksdk.Result{}, true},
		{"a null claim_epoch is this claim's", `{"claim_epoch":null,"outcome":{}}`, webhooksdk.Result{Outcome: &webhooksdk.Outcome{}}, false},
		{"not json", `<html>`, webhooksdk.Result{}, true},
		{"empty", ``, webhooksdk.Result{}, true},
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
