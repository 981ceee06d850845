package provider

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// leafFor returns the provider New builds for kind/version with o.
func leafFor(t *testing.T, o Options, kind string, version int) webhooksdk.Provider {
	t.Helper()
	for _, p := range New(o) {
		if p.Kind() == (webhooksdk.KindVersion{Kind: kind, Version: version}) {
			return p
		}
	}
	t.Fatalf("New has no provider for %s/%d", kind, version)
	return nil
}

func leafRequest(kind string, version int, name, spec string) webhooksdk.Request {
	return webhooksdk.Request{TaskID: "task-1", Attempt: 1, Reaction: "specChange", KindVersion: version,
		Trigger: webhooksdk.TriggerSpecChange, TaskType: webhooksdk.TaskReconcile,
		Resource: webhooksdk.Resource{ID: "id-" + name, Kind: kind, KindVersion: version, Name: name, Spec: json.RawMessage(spec), Phase: "Reconciling"}}
}

// runLeaf runs req on kind/version and decodes its status into a map.
func runLeaf(t *testing.T, kind string, version int, req webhooksdk.Request) (map[string]any, webhooksdk.Outcome) {
	t.Helper()
	out, err := sdktest.Run(t, leafFor(t, Options{}, kind, version), req)
	if err != nil {
		t.Fatalf("%s/%d %s: %v", kind, version, req.Resource.Name, err)
	}
	var st map[string]any
	if err := json.Unmarshal(out.Status, &st); err != nil {
		t.Fatalf("%s/%d status %s: %v", kind, version, out.Status, err)
	}
	return st, out
}

var twelveDigits = regexp.MustCompile(`^[0-9]{12}$`)

func TestAccount(t *testing.T) {
	t.Parallel()
	ids := map[string]string{}
	for _, name := range []string{"classic-payments-checkout", "classic-payments-ledger", "a", "", "classic-identity-tgw-host"} {
		st, _ := runLeaf(t, "account", 1, leafRequest("account", 1, name, `{"team_name": "checkout"}`))
		id, _ := st["account_id"].(string)
		if !twelveDigits.MatchString(id) {
			t.Errorf("account %q: account_id %q, want 12 digits (vpc's schema requires exactly 12)", name, id)
		}
		if id != accountID(name) {
			t.Errorf("account %q: account_id %q, want accountID(name) %q", name, id, accountID(name))
		}
		if st["team_name"] != "checkout" || len(st) != 2 {
			t.Errorf("account %q: status %v, want account_id and team_name checkout", name, st)
		}
		if other, dup := ids[id]; dup {
			t.Errorf("accounts %q and %q share account_id %s", other, name, id)
		}
		ids[id] = name
		// Stable across deliveries and independent of the spec.
		again, _ := runLeaf(t, "account", 1, leafRequest("account", 1, name, `{"team_name": "other"}`))
		if again["account_id"] != id {
			t.Errorf("account %q: account_id changed from %s to %v", name, id, again["account_id"])
		}
	}
}

func TestVPC(t *testing.T) {
	t.Parallel()
	const spec = `{"account_id": "123456789012", "cidr": "10.1.2.0/24", "region": "eu-west-1", "tags": {"a": "b"}}`
	for _, tc := range []struct {
		version int
		want    map[string]any
	}{
		// v1 ignores a region (its schema forbids one anyway) so status
		// shows which version ran.
		{1, map[string]any{"vpc_id": simulatedID("vpc", "v"), "account_id": "123456789012", "cidr": "10.1.2.0/24"}},
		{2, map[string]any{"vpc_id": simulatedID("vpc", "v"), "account_id": "123456789012", "cidr": "10.1.2.0/24", "region": "eu-west-1"}},
	} {
		st, out := runLeaf(t, "vpc", tc.version, leafRequest("vpc", tc.version, "v", spec))
		if !maps.Equal(st, tc.want) {
			t.Errorf("vpc/%d status = %v, want %v", tc.version, st, tc.want)
		}
		if out.OperationOutput != nil {
			t.Errorf("vpc/%d specChange has operation output %s", tc.version, out.OperationOutput)
		}
	}
	id, _ := runLeaf(t, "vpc", 1, leafRequest("vpc", 1, "v", `{"account_id": "000000000000", "cidr": "10.0.0.0/24"}`))
	if id["vpc_id"] != simulatedID("vpc", "v") {
		t.Errorf("vpc_id %v depends on the spec, want it derived from the name only", id["vpc_id"])
	}
	if vid, _ := id["vpc_id"].(string); !strings.HasPrefix(vid, "vpc-") || !hexID.MatchString(strings.TrimPrefix(vid, "vpc-")) {
		t.Errorf("vpc_id %q, want vpc- and 12 hex digits", vid)
	}
}

func flowLogsRequest(version int, config string) webhooksdk.Request {
	req := leafRequest("vpc", version, "v", `{"account_id": "123456789012", "cidr": "10.1.2.0/24", "region": "us-west-2"}`)
	req.TaskID, req.Reaction, req.TaskType, req.Trigger = "op-42", "enable_flow_logs", webhooksdk.TaskOperate, webhooksdk.TriggerOperation
	req.Operation = &webhooksdk.Operation{Verb: "enable_flow_logs"}
	if config != "" {
		req.Config = json.RawMessage(config)
	}
	return req
}

func TestVPCEnableFlowLogs(t *testing.T) {
	t.Parallel()
	for _, version := range []int{1, 2} {
		st, out := runLeaf(t, "vpc", version, flowLogsRequest(version, `{"flow_logs_bucket": "s3://logs", "default_region": "x"}`))
		if st["flow_logs"] != true || st["vpc_id"] != simulatedID("vpc", "v") {
			t.Errorf("vpc/%d enable_flow_logs status = %v, want flow_logs true beside vpc_id", version, st)
		}
		if _, ok := st["region"]; ok != (version == 2) {
			t.Errorf("vpc/%d enable_flow_logs status = %v: region present %v, want %v", version, st, ok, version == 2)
		}
		var op map[string]any
		if err := json.Unmarshal(out.OperationOutput, &op); err != nil {
			t.Fatalf("vpc/%d operation output %s: %v", version, out.OperationOutput, err)
		}
		if want := map[string]any{"flow_logs": true, "bucket": "s3://logs", "operation_id": "op-42"}; !maps.Equal(op, want) {
			t.Errorf("vpc/%d operation output = %v, want %v", version, op, want)
		}
	}
}

func TestVPCEnableFlowLogsNeedsBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, config, want string }{
		{"no config", "", "names no flow_logs_bucket"},
		{"no bucket", `{"default_region": "us-west-2"}`, "names no flow_logs_bucket"},
		{"empty bucket", `{"flow_logs_bucket": ""}`, "names no flow_logs_bucket"},
		{"bad config", `{"flow_logs_bucket": 7}`, "decode vpc config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, version := range []int{1, 2} {
				_, err := sdktest.Run(t, leafFor(t, Options{}, "vpc", version), flowLogsRequest(version, tc.config))
				var term *webhooksdk.TerminalError
				if !errors.As(err, &term) {
					t.Errorf("vpc/%d: err = %v, want a terminal error (a retry cannot add a bucket)", version, err)
				} else if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("vpc/%d: err = %q, want it to contain %q", version, err, tc.want)
				}
			}
		})
	}
}

func TestTGW(t *testing.T) {
	t.Parallel()
	st, _ := runLeaf(t, "tgw", 1, leafRequest("tgw", 1, "classic-payments", `{"name": "classic-payments", "account_id": "123456789012"}`))
	want := map[string]any{"tgw_id": simulatedID("tgw", "classic-payments"), "account_id": "123456789012"}
	if !maps.Equal(st, want) {
		t.Errorf("tgw status = %v, want %v", st, want)
	}
	// tgw_id follows spec.name, not the resource name, and is stable.
	again, _ := runLeaf(t, "tgw", 1, leafRequest("tgw", 1, "renamed", `{"name": "classic-payments"}`))
	if again["tgw_id"] != want["tgw_id"] {
		t.Errorf("tgw_id %v, want %v for the same spec.name", again["tgw_id"], want["tgw_id"])
	}
	other, _ := runLeaf(t, "tgw", 1, leafRequest("tgw", 1, "classic-identity", `{"name": "classic-identity"}`))
	if other["tgw_id"] == want["tgw_id"] {
		t.Errorf("two tgws share tgw_id %v", want["tgw_id"])
	}
}

func TestRoute(t *testing.T) {
	t.Parallel()
	st, _ := runLeaf(t, "route", 1, leafRequest("route", 1, "r", `{"vpc_id": "vpc-1", "tgw_id": "tgw-1"}`))
	want := map[string]any{"route_id": simulatedID("rtb", "vpc-1/tgw-1"), "vpc_id": "vpc-1", "tgw_id": "tgw-1"}
	if !maps.Equal(st, want) {
		t.Errorf("route status = %v, want %v", st, want)
	}
	if again, _ := runLeaf(t, "route", 1, leafRequest("route", 1, "other-name", `{"vpc_id": "vpc-1", "tgw_id": "tgw-1"}`)); again["route_id"] != want["route_id"] {
		t.Errorf("route_id %v, want %v: stable for the same vpc and tgw", again["route_id"], want["route_id"])
	}
	if other, _ := runLeaf(t, "route", 1, leafRequest("route", 1, "r", `{"vpc_id": "vpc-2", "tgw_id": "tgw-1"}`)); other["route_id"] == want["route_id"] {
		t.Errorf("routes of different vpcs share route_id %v", other["route_id"])
	}
}

// TestRouteNotFlowed: a route whose ids did not flow in is a terminal error
// naming the missing field.
func TestRouteNotFlowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ spec, field string }{
		{`{}`, "spec.vpc_id"},
		{`{"tgw_id": "tgw-1"}`, "spec.vpc_id"},
		{`{"vpc_id": "", "tgw_id": "tgw-1"}`, "spec.vpc_id"},
		{`{"vpc_id": "vpc-1"}`, "spec.tgw_id"},
		{`{"vpc_id": "vpc-1", "tgw_id": ""}`, "spec.tgw_id"},
	} {
		_, err := sdktest.Run(t, leafFor(t, Options{}, "route", 1), leafRequest("route", 1, "r", tc.spec))
		if !webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), tc.field+" is empty") {
			t.Errorf("route %s: err = %v, want a terminal error saying %s is empty", tc.spec, err, tc.field)
		}
	}
}

func TestLeafBadSpecIsTerminal(t *testing.T) {
	t.Parallel()
	for _, kv := range leafKinds {
		for _, spec := range []string{`"a string"`, `{"team_name": 1, "cidr": 2, "name": 3, "vpc_id": 4}`, `{`} {
			_, err := sdktest.Run(t, leafFor(t, Options{}, kv.Kind, kv.Version), leafRequest(kv.Kind, kv.Version, "x", spec))
			if !webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), "decode "+kv.Kind+" spec") {
				t.Errorf("%v with spec %s: err = %v, want a terminal decode error", kv, spec, err)
			}
		}
	}
}

var leafKinds = []webhooksdk.KindVersion{{Kind: "account", Version: 1}, {Kind: "vpc", Version: 1}, {Kind: "vpc", Version: 2}, {Kind: "tgw", Version: 1}, {Kind: "route", Version: 1}}

// validSpecs are specs each leaf accepts.
var validSpecs = map[string]string{
	"account": `{"team_name": "t"}`,
	"vpc":     `{"account_id": "123456789012", "cidr": "10.0.0.0/24", "region": "r"}`,
	"tgw":     `{"name": "t"}`,
	"route":   `{"vpc_id": "v", "tgw_id": "t"}`,
}

// TestLeafFaults: FaultRate 1 fails every leaf task, delete tasks included,
// with the transient errFault; FaultRate 0 never does.
func TestLeafFaults(t *testing.T) {
	t.Parallel()
	for _, kv := range leafKinds {
		always := leafFor(t, Options{FaultRate: 1}, kv.Kind, kv.Version)
		never := leafFor(t, Options{FaultRate: 0}, kv.Kind, kv.Version)
		for _, tt := range []webhooksdk.TaskType{webhooksdk.TaskReconcile, webhooksdk.TaskDelete} {
			req := leafRequest(kv.Kind, kv.Version, "x", validSpecs[kv.Kind])
			req.TaskType = tt
			for range 50 {
				_, err := always.Work(t.Context(), req)
				if !errors.Is(err, errFault) || webhooksdk.IsTerminal(err) {
					t.Fatalf("%v %s at FaultRate 1: err = %v, want the transient errFault", kv, tt, err)
				}
				if _, err := never.Work(t.Context(), req); err != nil {
					t.Fatalf("%v %s at FaultRate 0: %v", kv, tt, err)
				}
			}
		}
	}
}

func TestFault(t *testing.T) {
	t.Parallel()
	for range 1000 {
		if fault(0) || fault(-1) {
			t.Fatal("fault fired at rate <= 0")
		}
		if !fault(1) {
			t.Fatal("fault did not fire at rate 1")
		}
	}
}

// TestLeafDelete: a delete task tears down (whatever the spec) and records
// kind/name in the log, in order, again on redelivery.
func TestLeafDelete(t *testing.T) {
	t.Parallel()
	log := &TeardownLog{}
	var want []string
	for _, kv := range leafKinds {
		p := leafFor(t, Options{Teardowns: log}, kv.Kind, kv.Version)
		req := leafRequest(kv.Kind, kv.Version, "gone-"+kv.Kind, `"not a spec the leaf could decode"`)
		req.TaskType, req.Reaction, req.Trigger = webhooksdk.TaskDelete, "teardown", webhooksdk.TriggerDeleteRequested
		out, err := p.Work(t.Context(), req)
		if err != nil {
			t.Fatalf("%v delete: %v", kv, err)
		}
		if out.Status != nil || out.Children != nil || out.OperationOutput != nil {
			t.Errorf("%v delete returned %+v, want an empty outcome", kv, out)
		}
		want = append(want, kv.Kind+"/gone-"+kv.Kind)
	}
	// The composer's teardown reaction is recorded the same way.
	b := &bom{o: Options{Teardowns: log}}
	if _, err := b.Work(t.Context(), bomRequest("classic", nil, "teardown")); err != nil {
		t.Fatalf("classicbom teardown: %v", err)
	}
	want = append(want, "classicbom/classic")
	if got := log.Entries(); !slices.Equal(got, want) {
		t.Errorf("teardown log = %q, want %q", got, want)
	}
}

func TestLeafDeleteNilLog(t *testing.T) {
	t.Parallel()
	req := leafRequest("vpc", 1, "v", validSpecs["vpc"])
	req.TaskType = webhooksdk.TaskDelete
	if _, err := leafFor(t, Options{}, "vpc", 1).Work(t.Context(), req); err != nil {
		t.Fatalf("delete with no teardown log: %v", err)
	}
}

// TestDelaysHonourContext: the simulated delays end early, with ctx's error,
// when the task's context is done, and record no teardown.
func TestDelaysHonourContext(t *testing.T) {
	t.Parallel()
	for _, tt := range []webhooksdk.TaskType{webhooksdk.TaskReconcile, webhooksdk.TaskDelete} {
		log := &TeardownLog{}
		p := leafFor(t, Options{WorkDelay: time.Hour, DeleteDelay: time.Hour, Teardowns: log}, "account", 1)
		req := leafRequest("account", 1, "a", validSpecs["account"])
		req.TaskType = tt

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if out, err := p.Work(ctx, req); !errors.Is(err, context.Canceled) || out.Status != nil {
			t.Errorf("%s with a cancelled context: %+v, %v; want context.Canceled", tt, out, err)
		}
		ctx, cancel = context.WithTimeout(t.Context(), time.Millisecond)
		_, err := p.Work(ctx, req)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s past its deadline: err = %v, want context.DeadlineExceeded", tt, err)
		}
		if got := log.Entries(); len(got) != 0 {
			t.Errorf("%s: an interrupted task recorded teardowns %q", tt, got)
		}
	}
	b := &bom{o: Options{DeleteDelay: time.Hour}}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Work(ctx, bomRequest("classic", nil, "teardown")); !errors.Is(err, context.Canceled) {
		t.Errorf("classicbom teardown with a cancelled context: err = %v, want context.Canceled", err)
	}
}

// TestDelaysWait: the delays are waited out (a lower bound, so no flake on a
// slow machine).
func TestDelaysWait(t *testing.T) {
	t.Parallel()
	const d = 30 * time.Millisecond
	log := &TeardownLog{}
	p := leafFor(t, Options{WorkDelay: d, DeleteDelay: d, Teardowns: log}, "tgw", 1)
	for _, tt := range []webhooksdk.TaskType{webhooksdk.TaskReconcile, webhooksdk.TaskDelete} {
		req := leafRequest("tgw", 1, "t", validSpecs["tgw"])
		req.TaskType = tt
		start := time.Now()
		if _, err := p.Work(t.Context(), req); err != nil {
			t.Fatalf("%s: %v", tt, err)
		}
		if el := time.Since(start); el < d {
			t.Errorf("%s returned after %v, want at least the %v delay", tt, el, d)
		}
	}
	if got := log.Entries(); !slices.Equal(got, []string{"tgw/t"}) {
		t.Errorf("teardown log = %q, want [tgw/t]", got)
	}
}
