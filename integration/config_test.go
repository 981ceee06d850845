package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/inproc"
	"github.com/convergeplane/converge/webhooksdk"
)

// configProvider records the effective config each resource's task carried,
// byte for byte, and may emit provider configs of its own.
type configProvider struct {
	kind string
	emit []webhooksdk.Config

	mu   sync.Mutex
	seen map[string]json.RawMessage // resource name -> req.Config
}

func (p *configProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}
func (p *configProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	p.mu.Lock()
	p.seen[req.Resource.Name] = append(json.RawMessage(nil), req.Config...)
	p.mu.Unlock()
	return webhooksdk.Outcome{Status: json.RawMessage(`{}`), Configs: p.emit}, nil
}

func (p *configProvider) config(name string) json.RawMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[name]
}

// TestProviderConfigReachesTheProviderExactly applies provider configs
// through the REST API and checks what a provider served over real HTTP
// receives: the kind default deep-merged with the resource's override, with
// integers beyond float64's 2^53 (9007199254740993 would arrive as
// ...992 through a float) and nested objects exact. It also checks that a
// default config a provider emits keeps is_default over the wire.
func TestProviderConfigReachesTheProviderExactly(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	for _, m := range []map[string]any{
		{"kind": "cfg", "kind_version": 1, "reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)},
		{"kind": "maker", "kind_version": 1, "reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["configs","status"]}]`)},
		{"kind": "made", "kind_version": 1, "reactions": json.RawMessage(`[]`)},
	} {
		if code, body := s.call("PUT", "/kinds/"+m["kind"].(string)+"/manifest", m); code != 201 {
			t.Fatalf("manifest %s = %d %s", m["kind"], code, body)
		}
	}
	for _, c := range []string{
		`{"name":"cfg-default","kind":"cfg","kind_version":1,"is_default":true,
		  "spec":{"limits":{"max":9007199254740993,"min":1,"deep":{"a":{"b":12345678901234567890}}},"region":"eu","tags":["x"]}}`,
		`{"name":"cfg-big","kind":"cfg","kind_version":1,
		  "spec":{"limits":{"min":-9007199254740993,"deep":{"a":{"c":0.1000000000000000055511151231257827}}},"tags":["y"]}}`,
	} {
		if code, body := s.call("POST", "/providerconfigs", json.RawMessage(c)); code != 201 {
			t.Fatalf("providerconfig = %d %s", code, body)
		}
	}
	cfg := &configProvider{kind: "cfg", seen: map[string]json.RawMessage{}}
	maker := &configProvider{kind: "maker", seen: map[string]json.RawMessage{}, emit: []webhooksdk.Config{{
		Name: "made-default", Kind: "made", KindVersion: 1, IsDefault: true, Spec: json.RawMessage(`{"n":9007199254740993}`)}}}
	s.serveProvider("configs", cfg, maker)

	for _, r := range []map[string]any{
		{"kind": "cfg", "kind_version": 1, "name": "plain", "spec": map[string]any{}},
		{"kind": "cfg", "kind_version": 1, "name": "overridden", "spec": map[string]any{}, "provider_config_ref": "cfg-big"},
		{"kind": "maker", "kind_version": 1, "name": "m", "spec": map[string]any{}},
	} {
		if code, body := s.call("POST", "/resources", r); code != 201 {
			t.Fatalf("apply %s = %d %s", r["name"], code, body)
		}
	}
	for _, name := range []string{"plain", "overridden"} {
		s.waitPhase("cfg", name, string(model.PhaseReady), 30*time.Second)
	}
	s.waitPhase("maker", "m", string(model.PhaseReady), 30*time.Second)

	for name, want := range map[string]string{
		"plain": `{"limits":{"max":9007199254740993,"min":1,"deep":{"a":{"b":12345678901234567890}}},"region":"eu","tags":["x"]}`,
		"overridden": `{"limits":{"deep":{"a":{"b":12345678901234567890,"c":0.1000000000000000055511151231257827}},
			"max":9007199254740993,"min":-9007199254740993},"region":"eu","tags":["y"]}`,
	} {
		got := cfg.config(name)
		if !sameJSONText(t, got, json.RawMessage(want)) {
			t.Errorf("%s: the provider got config\n%s\nwant (numbers exact)\n%s", name, got, want)
		}
	}
	var (
		isDefault bool
		spec      string
	)
	must(t, s.db.Pool.QueryRow(t.Context(), `SELECT is_default, spec::text FROM providerconfigs WHERE name = 'made-default'`).Scan(&isDefault, &spec))
	if !isDefault || !strings.Contains(spec, "9007199254740993") {
		t.Errorf("emitted config stored as is_default=%t spec=%s; want the default, exact", isDefault, spec)
	}
	s.checkInvariants()
}

// sameJSONText reports whether a and b are the same JSON document with the
// same number texts: objects compare by key, whatever the order, and numbers
// compare as written, never through a float.
func sameJSONText(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	decode := func(raw json.RawMessage) any {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
		return v
	}
	ea, err := json.Marshal(decode(a))
	must(t, err)
	eb, err := json.Marshal(decode(b))
	must(t, err)
	return bytes.Equal(ea, eb)
}

// TestEmittedConfigMustBeAnObject: a provider config a reaction emits is
// merged with webhooksdk.MergeConfig before every later delivery, so one it
// would refuse must never be stored (it would stall every task of every
// resource using it). The outcome fails terminally, naming the config.
func TestEmittedConfigMustBeAnObject(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{})
	e.manifest("maker", 1, `[{"name":"work","trigger":"specChange","emits":["configs","status"]}]`, model.Policy{})
	e.manifest("made", 1, `[]`, model.Policy{})
	e.run(inproc.Config{}, map[string]inproc.Handler{"maker/1": inproc.HandlerFunc(
		func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
			return webhooksdk.Outcome{Status: json.RawMessage(`{}`), Configs: []webhooksdk.Config{
				{Name: "made-list", Kind: "made", KindVersion: 1, Spec: json.RawMessage(`[1,2]`)}}}, nil
		})})
	e.listen()

	e.apply("maker", "m", map[string]any{})
	e.waitPhase("maker", "m", string(model.PhaseFailed), 20*time.Second)
	var lastError string
	must(t, e.db.Pool.QueryRow(t.Context(), `SELECT coalesce(last_error, '') FROM resources WHERE name = 'm'`).Scan(&lastError))
	if !strings.Contains(lastError, "configs[0] (made-list): spec is not a JSON object") {
		t.Errorf("last_error = %q, want it to name configs[0]'s spec", lastError)
	}
	if n := e.count(`SELECT count(*) FROM providerconfigs`); n != 0 {
		t.Errorf("%d provider configs stored, want none", n)
	}
	e.checkInvariants()
}
