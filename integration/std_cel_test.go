package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/providers/stdcel"
	"github.com/convergeplane/converge/webhooksdk"
)

// leafProvider is a trivial leaf for stdcel's child kinds: its status is an id derived
// from its name plus its spec echoed back.
type leafProvider struct{ kind string }

func (p leafProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}
func (p leafProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	st, err := json.Marshal(map[string]any{"id": p.kind + "-" + req.Resource.Name, "spec": req.Resource.Spec})
	return webhooksdk.Outcome{Status: st}, err
}

// celGraph: db and app wait for net and receive its id; app also waits for db; audit
// reads app's spec and exists only when schema.spec.audit is true; db is ready once it
// reports an id.
const celGraph = `{"resources": [
  {"id": "net", "template": {"kind": "celnet", "kind_version": 1, "name": "${schema.metadata.name}-net",
     "spec": {"cidr": "${schema.spec.cidr}"}}},
  {"id": "db", "readyWhen": ["${db.status.id != ''}"],
   "template": {"kind": "celdb", "kind_version": 1, "name": "${schema.metadata.name}-db",
     "spec": {"net_id": "${net.status.id}", "size_gb": "${schema.spec.size * 10}"}}},
  {"id": "app", "template": {"kind": "celapp", "kind_version": 1, "name": "${schema.metadata.name}-app",
     "spec": {"network": "${net.status.id}", "db": "${db.status.id}", "cidr": "${net.spec.cidr}"}}},
  {"id": "audit", "includeWhen": ["${schema.spec.audit}"],
   "template": {"kind": "celnet", "kind_version": 1, "name": "${app.metadata.name}-audit",
     "spec": {"watch": "${app.metadata.name}"}}}
]}`

// TestStdCelGraphConverges serves stdcel and a leaf over real HTTP through the
// server: the shipped manifest and a 4-resource graph applied through the API
// converge, values flow from a status into a spec, and a cyclic graph fails the root
// terminally with the cycle named.
func TestStdCelGraphConverges(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	if code, body := s.call("PUT", "/kinds/stdcel/manifest", json.RawMessage(stdcel.Manifest())); code != 201 {
		t.Fatalf("stdcel manifest = %d %s", code, body)
	}
	// celapp types the fields that flow in: the composed spec must leave them out
	// until the core fills them.
	appSchema := json.RawMessage(`{"type": "object", "additionalProperties": false, "properties": {
	  "network": {"type": "string"}, "db": {"type": "string"}, "cidr": {"type": "string"}}}`)
	var leaves []webhooksdk.Provider
	for _, k := range []string{"celnet", "celdb", "celapp"} {
		m := map[string]any{"kind": k, "kind_version": 1,
			"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}
		if k == "celapp" {
			m["spec_schema"] = appSchema
		}
		if code, body := s.call("PUT", "/kinds/"+k+"/manifest", m); code != 201 {
			t.Fatalf("%s manifest = %d %s", k, code, body)
		}
		leaves = append(leaves, leafProvider{kind: k})
	}
	s.serveProvider("stdcel", stdcel.New("stdcel"))
	s.serveProvider("leaves", leaves...)

	cycle := `{"resources": [
	  {"id": "a", "template": {"kind": "celnet", "kind_version": 1, "name": "a", "spec": {"x": "${b.status.id}"}}},
	  {"id": "b", "template": {"kind": "celnet", "kind_version": 1, "name": "b", "spec": {"x": "${c.spec.x}"}}},
	  {"id": "c", "template": {"kind": "celnet", "kind_version": 1, "name": "c", "spec": {"x": "${a.status.id}"}}}]}`
	for _, c := range []map[string]any{
		{"name": "graph", "kind": "stdcel", "kind_version": 1, "is_default": true, "spec": json.RawMessage(celGraph)},
		{"name": "cyclic", "kind": "stdcel", "kind_version": 1, "spec": json.RawMessage(cycle)},
	} {
		if code, body := s.call("POST", "/providerconfigs", c); code != 201 {
			t.Fatalf("providerconfig %s = %d %s", c["name"], code, body)
		}
	}
	for _, r := range []map[string]any{
		{"kind": "stdcel", "kind_version": 1, "name": "shop", "spec": map[string]any{"cidr": "10.1.0.0/16", "size": 2, "audit": true}},
		{"kind": "stdcel", "kind_version": 1, "name": "loop", "spec": map[string]any{}, "provider_config_ref": "cyclic"},
	} {
		if code, body := s.call("POST", "/resources", r); code != 201 {
			t.Fatalf("apply %s = %d %s", r["name"], code, body)
		}
	}

	type resource struct {
		Phase      string                 `json:"phase"`
		LastError  string                 `json:"last_error"`
		Spec       map[string]any         `json:"spec"`
		Status     map[string]any         `json:"status"`
		Conditions []webhooksdk.Condition `json:"conditions"`
	}
	get := func(kind, name string) resource {
		code, body := s.call("GET", "/resources/"+kind+"/"+name, nil)
		var r resource
		if code != 200 || json.Unmarshal(body, &r) != nil {
			t.Fatalf("GET %s/%s = %d %s", kind, name, code, body)
		}
		return r
	}
	var root resource
	waitFor(t, 60*time.Second, "shop Ready with 4 of 4 ready", func() bool {
		root = get("stdcel", "shop")
		return root.Phase == string(model.PhaseReady) && root.Status["ready"] == float64(4)
	})
	for _, c := range [][2]string{{"celnet", "shop-net"}, {"celdb", "shop-db"}, {"celapp", "shop-app"}, {"celnet", "shop-app-audit"}} {
		if r := get(c[0], c[1]); r.Phase != string(model.PhaseReady) {
			t.Errorf("%s/%s is %s, want Ready", c[0], c[1], r.Phase)
		}
	}
	app := get("celapp", "shop-app")
	if app.Spec["network"] != "celnet-shop-net" || app.Spec["db"] != "celdb-shop-db" || app.Spec["cidr"] != "10.1.0.0/16" {
		t.Errorf("app spec = %v, want net's and db's ids flowed in and net's cidr inlined", app.Spec)
	}
	if db := get("celdb", "shop-db"); db.Spec["net_id"] != "celnet-shop-net" || db.Spec["size_gb"] != float64(20) {
		t.Errorf("db spec = %v, want net's id flowed in and size_gb 20", db.Spec)
	}
	if len(root.Conditions) == 0 || root.Conditions[0].Type != "Ready" || root.Conditions[0].Status != "True" {
		t.Errorf("shop conditions = %+v, want Ready True", root.Conditions)
	}

	s.waitPhase("stdcel", "loop", string(model.PhaseFailed), 30*time.Second)
	if r := get("stdcel", "loop"); !strings.Contains(r.LastError, "cycle: a -> b -> c -> a") {
		t.Errorf("loop last_error = %q, want the cycle named", r.LastError)
	}
	s.checkInvariants()
}
