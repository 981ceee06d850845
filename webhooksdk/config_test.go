package webhooksdk_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/webhooksdk"
)

type dbConfig struct {
	Endpoint string         `json:"endpoint"`
	PoolSize int            `json:"pool_size"`
	TLS      map[string]any `json:"tls"`
	Tags     []string       `json:"tags"`
}

func TestEffectiveConfig(t *testing.T) {
	t.Parallel()
	def := json.RawMessage(`{"endpoint":"db:5432","pool_size":4,"tls":{"mode":"require","ca":"x"},"tags":["a","b"]}`)
	tests := []struct {
		name     string
		reason   string
		def      json.RawMessage
		override json.RawMessage
		want     dbConfig
		wantErr  bool
	}{
		{
			name: "no override", reason: "absent override is the default verbatim",
			def:  def,
			want: dbConfig{Endpoint: "db:5432", PoolSize: 4, TLS: map[string]any{"mode": "require", "ca": "x"}, Tags: []string{"a", "b"}},
		},
		{
			name: "null override", reason: "null counts as absent",
			def: def, override: json.RawMessage(`null`),
			want: dbConfig{Endpoint: "db:5432", PoolSize: 4, TLS: map[string]any{"mode": "require", "ca": "x"}, Tags: []string{"a", "b"}},
		},
		{
			name: "override wins per key, nested merged", reason: "objects merge recursively; arrays replace",
			def: def, override: json.RawMessage(`{"pool_size":16,"tls":{"mode":"verify-full"},"tags":["c"]}`),
			want: dbConfig{Endpoint: "db:5432", PoolSize: 16, TLS: map[string]any{"mode": "verify-full", "ca": "x"}, Tags: []string{"c"}},
		},
		{
			name: "no default", reason: "the override alone",
			override: json.RawMessage(`{"endpoint":"other"}`),
			want:     dbConfig{Endpoint: "other"},
		},
		{name: "neither", reason: "zero value", want: dbConfig{}},
		{
			name: "malformed override keeps the default", reason: "a malformed override never wipes the default",
			def: def, override: json.RawMessage(`{"pool_size":`),
			want:    dbConfig{Endpoint: "db:5432", PoolSize: 4, TLS: map[string]any{"mode": "require", "ca": "x"}, Tags: []string{"a", "b"}},
			wantErr: true,
		},
		{
			name: "non-object override keeps the default", reason: "a config is an object",
			def: def, override: json.RawMessage(`[1,2]`),
			want:    dbConfig{Endpoint: "db:5432", PoolSize: 4, TLS: map[string]any{"mode": "require", "ca": "x"}, Tags: []string{"a", "b"}},
			wantErr: true,
		},
		{
			name: "malformed default", reason: "nothing to fall back on",
			def: json.RawMessage(`{"endpoint"`), override: json.RawMessage(`{"pool_size":1}`),
			wantErr: true,
		},
		{
			name: "type mismatch", reason: "the merged document must decode into T",
			def: def, override: json.RawMessage(`{"pool_size":"many"}`),
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := webhooksdk.EffectiveConfig[dbConfig](tt.def, tt.override)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v (%s)", err, tt.wantErr, tt.reason)
			}
			if tt.name == "type mismatch" {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("EffectiveConfig (-want +got) (%s):\n%s", tt.reason, diff)
			}
		})
	}
}

func TestMergeConfigKeepsNumbers(t *testing.T) {
	t.Parallel()
	got, err := webhooksdk.MergeConfig(json.RawMessage(`{"big":12345678901234567890,"f":1.50}`), json.RawMessage(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"big":12345678901234567890,"f":1.50,"x":1}`; string(got) != want {
		t.Fatalf("MergeConfig = %s, want %s", got, want)
	}
}

func TestMergeConfigKeepsLargeIntegersAndNesting(t *testing.T) {
	t.Parallel()
	got, err := webhooksdk.MergeConfig(json.RawMessage(`{"limits":{"max":9007199254740993,"min":1},"x":1}`),
		json.RawMessage(`{"limits":{"min":-9007199254740993}}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"limits":{"max":9007199254740993,"min":-9007199254740993},"x":1}`; string(got) != want {
		t.Fatalf("MergeConfig = %s, want %s", got, want)
	}
}

// TestCheckConfigSpec pins what a config spec may be: what MergeConfig accepts
// on either side. The core refuses anything else (REST API and composer outcomes).
func TestCheckConfigSpec(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{``, `null`, ` {} `, `{"a":{"b":[1,2]},"n":9007199254740993}`} {
		if err := webhooksdk.CheckConfigSpec(json.RawMessage(spec)); err != nil {
			t.Errorf("CheckConfigSpec(%s) = %v, want nil", spec, err)
		}
		if _, err := webhooksdk.MergeConfig(json.RawMessage(`{"d":1}`), json.RawMessage(spec)); err != nil {
			t.Errorf("MergeConfig refuses %s as an override: %v", spec, err)
		}
	}
	for _, spec := range []string{`[1]`, `"x"`, `1`, `true`, `{"a":`, `{} {}`, `{}x`} {
		if err := webhooksdk.CheckConfigSpec(json.RawMessage(spec)); err == nil {
			t.Errorf("CheckConfigSpec(%s) = nil, want an error", spec)
		}
		if _, err := webhooksdk.MergeConfig(json.RawMessage(`{"d":1}`), json.RawMessage(spec)); err == nil {
			t.Errorf("MergeConfig accepts %s as an override, CheckConfigSpec does not", spec)
		}
		if _, err := webhooksdk.MergeConfig(json.RawMessage(spec), json.RawMessage(`{"o":1}`)); err == nil {
			t.Errorf("MergeConfig accepts %s as a default, CheckConfigSpec does not", spec)
		}
	}
}

func TestEffectiveBundle(t *testing.T) {
	t.Parallel()
	def, ov := []byte("default"), []byte("override")
	if got := webhooksdk.EffectiveBundle(def, ov); string(got) != "override" {
		t.Errorf("override present: got %q", got)
	}
	if got := webhooksdk.EffectiveBundle(def, nil); string(got) != "default" {
		t.Errorf("override absent: got %q", got)
	}
	if got := webhooksdk.EffectiveBundle(def, []byte{}); string(got) != "default" {
		t.Errorf("override empty: got %q", got)
	}
}

func TestTerminal(t *testing.T) {
	t.Parallel()
	base := errors.New("bad spec")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"plain", base, false},
		{"terminal", webhooksdk.Terminal(base), true},
		{"wrapped terminal", fmt.Errorf("reconcile: %w", webhooksdk.Terminal(base)), true},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := webhooksdk.IsTerminal(tt.err); got != tt.want {
				t.Fatalf("IsTerminal = %v, want %v", got, tt.want)
			}
		})
	}
	if webhooksdk.Terminal(nil) != nil {
		t.Error("Terminal(nil) != nil")
	}
	term := webhooksdk.Terminal(base)
	if !errors.Is(term, base) {
		t.Error("Terminal does not unwrap to its cause")
	}
	if _, ok := errors.AsType[*webhooksdk.TerminalError](term); !ok {
		t.Error("errors.AsType does not find *TerminalError")
	}
	if term.Error() != "bad spec" {
		t.Errorf("message = %q", term.Error())
	}
}

func TestOutcomeValidate(t *testing.T) {
	t.Parallel()
	valid := webhooksdk.Outcome{
		Status:   json.RawMessage(`{"ok":true}`),
		Children: []webhooksdk.Child{{Kind: "vpc", KindVersion: 1, Name: "a"}},
		Edges: []webhooksdk.Edge{{
			Dependent: webhooksdk.Ref{Kind: "route", Name: "a"}, Dependency: webhooksdk.Ref{Kind: "vpc", Name: "a"},
			Values: []webhooksdk.ValueFlow{{DependentField: "/vpc_id", SourceField: "/vpc_id"}},
		}},
		Configs: []webhooksdk.Config{{Name: "c", Kind: "vpc", KindVersion: 2}},
	}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid outcome: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(o *webhooksdk.Outcome)
	}{
		{"child version 0", func(o *webhooksdk.Outcome) { o.Children[0].KindVersion = 0 }},
		{"child version too big", func(o *webhooksdk.Outcome) { o.Children[0].KindVersion = 32768 }},
		{"child without name", func(o *webhooksdk.Outcome) { o.Children[0].Name = "" }},
		{"config version 0", func(o *webhooksdk.Outcome) { o.Configs[0].KindVersion = 0 }},
		{"config spec an array", func(o *webhooksdk.Outcome) { o.Configs[0].Spec = json.RawMessage(`[1]`) }},
		{"config spec not JSON", func(o *webhooksdk.Outcome) { o.Configs[0].Spec = json.RawMessage(`{"a":`) }},
		{"edge without dependency", func(o *webhooksdk.Outcome) { o.Edges[0].Dependency = webhooksdk.Ref{} }},
		{"value flow not a pointer", func(o *webhooksdk.Outcome) { o.Edges[0].Values[0].SourceField = "vpc_id" }},
		{"status not JSON", func(o *webhooksdk.Outcome) { o.Status = json.RawMessage(`{`) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := valid
			o.Children = append([]webhooksdk.Child(nil), valid.Children...)
			o.Configs = append([]webhooksdk.Config(nil), valid.Configs...)
			o.Edges = []webhooksdk.Edge{valid.Edges[0]}
			o.Edges[0].Values = append([]webhooksdk.ValueFlow(nil), valid.Edges[0].Values...)
			tt.mutate(&o)
			if err := o.Validate(); err == nil {
				t.Fatal("Validate = nil, want an error")
			}
		})
	}
}
