package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestDescribe: describe shows a resource's object, conditions, current
// task, events and deliveries in one view, and an endpoint with its
// deliveries.
func TestDescribe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, "manifest", manifestBoxOnly)
	b.seed(t, "ep", "name: net\ntarget: {type: https, url: 'https://x/converge'}\nkinds: [{kind: box, kind_version: 1}]\n")
	b.seed(t, "res", `{"kind": "box", "kind_version": 1, "name": "b1", "labels": {"team": "a"}, "spec": {"size": 3}}`)
	task := claim(t, b, "box/1", 1)[0]
	complete(t, b, task, webhooksdk.Result{Error: &webhooksdk.Error{Message: "quota exceeded"}})
	id, err := b.api.st.ResourceID(t.Context(), "", "box", "b1")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.api.st.RecordDeliveries(t.Context(), []store.Delivery{{Endpoint: "net", At: time.Now(),
		Resource: store.DeliveryResource{ID: id, Kind: "box", Name: "b1"}, TaskID: task.ID, TaskType: "reconcile",
		ClaimEpoch: task.ClaimEpoch, Attempt: 1, HTTPStatus: 503, LatencyMS: 12, Classification: "server_error", Excerpt: "busy"}}); err != nil {
		t.Fatal(err)
	}
	b.api.forget()

	r := b.run(t, "", "describe", "resource", "box/b1")
	wantCode(t, r, ExitOK)
	wantRequests(t, b, "GET /resources/box/b1", "GET /deliveries?kind=box&limit=10&name=b1", "GET /resources/box/b1/events?limit=10")
	out := r.stdout
	for _, want := range []string{
		"Name:             box/b1\n",
		"Phase:            Failed\n",
		"Labels:           team=a\n",
		"Last error:       quota exceeded\n",
		"Spec:\n  {\n    \"size\": 3\n  }\n",
		"Conditions:\n  TYPE     STATUS   REASON           LAST_TRANSITION        MESSAGE\n  Synced   False    ReconcileError   ",
		"Task:\n  ID:          " + task.ID + "\n  Type:        reconcile\n  State:       pending\n",
		"  Last error:  quota exceeded\n",
		"Deliveries (newest 1):\n  ID ",
		"   net        box/b1     reconcile   ",
		"server_error     busy\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?s)Events \(newest \d+\):\n  AT +TYPE +GEN +MESSAGE\n.*quota exceeded`).MatchString(out) {
		t.Errorf("describe shows no event of the failure")
	}

	r = b.run(t, "", "describe", "res", "box/b1", "-o", "json")
	wantCode(t, r, ExitOK)
	var doc struct {
		Resource   map[string]any   `json:"resource"`
		Events     []map[string]any `json:"events"`
		Deliveries []map[string]any `json:"deliveries"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Resource["name"] != "b1" || doc.Resource["task"] == nil || len(doc.Events) == 0 || len(doc.Deliveries) != 1 {
		t.Errorf("describe -o json = %s", r.stdout)
	}

	r = b.run(t, "", "describe", "endpoint", "net")
	wantCode(t, r, ExitOK)
	for _, want := range []string{"Name:    net\n", "Target:  https://x/converge\n", "Kinds:   box/v1\n", "Deliveries (newest 1):\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("describe endpoint lacks %q", want)
		}
	}

	r = b.run(t, "", "describe", "resource", "box/nope")
	wantCode(t, r, ExitFailure)
}
