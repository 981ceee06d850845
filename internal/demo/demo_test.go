package demo

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/watchview"
)

func TestDemoFor(t *testing.T) {
	t.Parallel()
	d, err := For("classic", Settings{BOM: "large", FaultRate: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if d.binary != "classic-provider" || len(d.steps) != 1 || !slices.Equal(d.steps[0].args, []string{"objects", "--bom", "large"}) ||
		!slices.Contains(d.env, "FAKE_FAULT_RATE=0.25") || d.s3 != anyS3 {
		t.Errorf("classic large 0.25 = %+v", d)
	}
	// The updated BOM is applied onto the small one, so that it shows
	// something removed.
	if d, err := For("classic", Settings{BOM: "updated"}); err != nil || len(d.steps) != 2 || !slices.Equal(d.steps[0].args, []string{"objects", "--bom", "small"}) ||
		!slices.Equal(d.steps[1].args, []string{"objects", "--bom", "updated"}) {
		t.Errorf("classic updated = %+v, %v", d, err)
	}
	if d, err := For("quickstart", Settings{BOM: "small"}); err != nil || d.binary != "quickstart-provider" || d.s3 != noS3 {
		t.Errorf("quickstart = %+v, %v", d, err)
	}
	if d, err := For("unhealthy", Settings{ReadyAfter: time.Second}); err != nil || d.binary != "quickstart-provider" || d.unready != "cdn" || d.readyAfter != time.Second {
		t.Errorf("unhealthy = %+v, %v", d, err)
	}
	if _, err := For("unhealthy", Settings{ReadyAfter: -time.Second}); err == nil {
		t.Error("unhealthy with a negative ready-after accepted")
	}
	if d, err := For("datadriven", Settings{}); err != nil || d.binary != "stdprovider" || d.objects != "datadriven-demo" ||
		!slices.Equal(d.needs, []string{"terraform"}) || len(d.steps) != 2 || d.s3 != embeddedS3 ||
		!slices.Equal(expand(d.steps[1].args, strings.NewReplacer("{dir}", "/x", "{s3}", "http://s", "{bucket}", "b")),
			[]string{"objects", "--dir", "/x", "--s3", "http://s", "--bucket", "b", "--updated"}) {
		t.Errorf("datadriven = %+v, %v", d, err)
	}
	for _, c := range []struct {
		name, bom string
		rate      float64
	}{{"classic", "huge", 0}, {"classic", "small", 1}, {"classic", "small", -0.1}, {"other", "small", 0}} {
		if _, err := For(c.name, Settings{BOM: c.bom, FaultRate: c.rate}); err == nil {
			t.Errorf("For(%q, %q, %g) accepted", c.name, c.bom, c.rate)
		}
	}
}

func TestWithS3(t *testing.T) {
	t.Parallel()
	sink := json.RawMessage(`{"name":"sink","kind":"statussink","kind_version":1,"spec":{"endpoint":"x"}}`)
	got, err := withS3(sink, "http://127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	var pc struct {
		Name string         `json:"name"`
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(got, &pc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"endpoint": "http://127.0.0.1:9", "bucket": "converge-demo", "prefix": "status", "region": "us-east-1"}
	if pc.Name != "sink" || len(pc.Spec) != len(want) || pc.Spec["endpoint"] != want["endpoint"] || pc.Spec["bucket"] != want["bucket"] ||
		pc.Spec["prefix"] != want["prefix"] || pc.Spec["region"] != want["region"] {
		t.Errorf("statussink config = %s", got)
	}
	other := json.RawMessage(`{"name":"v","kind":"vpc","kind_version":1,"spec":{"a":1}}`)
	if got, err := withS3(other, "http://127.0.0.1:9"); err != nil || !bytes.Equal(got, other) {
		t.Errorf("a vpc config became %s, %v", got, err)
	}
	if _, err := withS3(sink, ""); err == nil {
		t.Error("a statussink config without an S3 store passed")
	}
}

// TestNextSteps: the hints name the demo's own resources, and make hints
// appear only where the Makefile is, never the demo that just ran, each
// naming the Makefile's demo target and variables it has.
func TestNextSteps(t *testing.T) {
	t.Parallel()
	tree := watchview.Snapshot{Root: watchview.Node{Kind: "classicbom", Name: "classic"}, Children: []watchview.Node{
		{Kind: "vpc", Name: "classic-b"}, {Kind: "vpc", Name: "classic-a"}, {Kind: "account", Name: "classic-a"}}}
	small, err := For("classic", Settings{BOM: "small"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(small.nextSteps("bin/conctl", "", tree, true), "\n")
	for _, want := range []string{"bin/conctl watch resource classicbom/classic --follow ", "bin/conctl op vpc/classic-a enable_flow_logs --wait ",
		"bin/conctl delete resource classicbom/classic ", "make demo BOM=updated ", "make demo BOM=large FAULT_RATE=0.25 "} {
		if !strings.Contains(got, want) {
			t.Errorf("hints lack %q:\n%s", want, got)
		}
	}
	if got := strings.Join(small.nextSteps("bin/conctl", "", tree, false), "\n"); strings.Contains(got, "make ") {
		t.Errorf("hints away from the Makefile name make:\n%s", got)
	}
	updated, err := For("classic", Settings{BOM: "updated"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(updated.nextSteps("bin/conctl", "", tree, true), "\n"); strings.Contains(got, "BOM=updated") || !strings.Contains(got, "BOM=large") {
		t.Errorf("after BOM=updated the hints are:\n%s", got)
	}
	quick, err := For("quickstart", Settings{})
	if err != nil {
		t.Fatal(err)
	}
	site := watchview.Snapshot{Root: watchview.Node{Kind: "site", Name: "shop"}}
	if got := quick.nextSteps("./conctl --server http://127.0.0.1:9", "", site, true); len(got) != 3 ||
		!strings.HasPrefix(got[0], "./conctl --server http://127.0.0.1:9 get resource site/shop     # ") {
		t.Errorf("quickstart hints = %q", got)
	}

	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var all []hint
	for _, name := range Names {
		d, err := For(name, Settings{BOM: "small"})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, d.hints...)
	}
	for _, h := range all {
		if !h.make {
			continue
		}
		f := strings.Fields(h.cmd)
		if f[0] != "make" || !regexp.MustCompile(`(?m)^`+f[1]+`:`).Match(makefile) {
			t.Errorf("hint %q: the Makefile has no target %s", h.cmd, f[1])
		}
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, "=")
			if !regexp.MustCompile(`(?m)^` + k + ` \?=`).Match(makefile) {
				t.Errorf("hint %q: the Makefile has no variable %s", h.cmd, k)
			}
			if k == "BOM" && !slices.Contains(BOMs, v) {
				t.Errorf("hint %q: no BOM %s", h.cmd, v)
			}
		}
	}
}

// TestConctl: the conctl next to converge, by a path that works from the
// working directory, with --server unless the server is at conctl's
// default.
func TestConctl(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "conctl"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noPath := func(string) string { return "" }
	for _, c := range []struct {
		env  Env
		want string
	}{
		{Env{BinDir: bin, Base: "http://127.0.0.1:8080", Getenv: noPath}, filepath.Join(bin, "conctl")},
		{Env{BinDir: bin, Base: "http://127.0.0.1:9000", Getenv: noPath}, filepath.Join(bin, "conctl") + " --server http://127.0.0.1:9000"},
		{Env{BinDir: t.TempDir(), Base: "http://127.0.0.1:8080", Getenv: noPath}, "conctl"},
		{Env{Base: "http://127.0.0.1:8080", Getenv: func(string) string { return bin }}, "conctl"}, // on PATH
	} {
		if got := Conctl(c.env); got != c.want {
			t.Errorf("Conctl(%+v) = %q, want %q", c.env, got, c.want)
		}
	}
}

func TestAppendTally(t *testing.T) {
	t.Parallel()
	got := appendTally(nil, "kind manifest", []string{"unchanged", "created", "unchanged"})
	got = appendTally(got, "reactor binding", []string{"created"})
	got = appendTally(got, "provider config", nil)
	if want := []string{"3 kind manifests (2 unchanged, 1 created)", "1 reactor binding (1 created)"}; !slices.Equal(got, want) {
		t.Errorf("tally = %q, want %q", got, want)
	}
}

// TestCheck: the datadriven demo needs its two binaries and terraform on
// PATH, and says which one is missing before anything starts.
func TestCheck(t *testing.T) {
	t.Parallel()
	bin, tools := t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(bin, "stdprovider"), filepath.Join(tools, "terraform")} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d, err := For("datadriven", Settings{})
	if err != nil {
		t.Fatal(err)
	}
	path := func(p string) func(string) string { return func(string) string { return p } }
	if err := d.Check(Env{BinDir: bin, Getenv: path(tools)}); err == nil || !strings.Contains(err.Error(), "datadriven-demo") {
		t.Errorf("without datadriven-demo: %v", err)
	}
	if err := os.WriteFile(filepath.Join(bin, "datadriven-demo"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.Check(Env{BinDir: bin, Getenv: path("")}); err == nil || !strings.Contains(err.Error(), "runs terraform") {
		t.Errorf("without terraform: %v", err)
	}
	if err := d.Check(Env{BinDir: bin, Getenv: path(tools)}); err != nil {
		t.Errorf("with everything: %v", err)
	}
}

// TestConverged: a demo's watch ends when the root and every child are Ready,
// not when the root alone is while a child an update pruned is still Deleting
// (the data-driven demo printed "removed: stdshell/shop-worker" alone while
// the cache module's destroy ran).
func TestConverged(t *testing.T) {
	node := func(phase string) watchview.Node { return watchview.Node{Kind: "k", Name: phase, Phase: phase} }
	for _, c := range []struct {
		name string
		s    watchview.Snapshot
		want bool
	}{
		{"all Ready", watchview.Snapshot{Root: node("Ready"), Children: []watchview.Node{node("Ready"), node("Ready")}}, true},
		{"no children", watchview.Snapshot{Root: node("Ready")}, true},
		{"a pruned child Deleting", watchview.Snapshot{Root: node("Ready"), Children: []watchview.Node{node("Ready"), node("Deleting")}}, false},
		{"root Reconciling", watchview.Snapshot{Root: node("Reconciling"), Children: []watchview.Node{node("Ready")}}, false},
	} {
		if got := converged(c.s); got != c.want {
			t.Errorf("%s: converged = %v, want %v", c.name, got, c.want)
		}
	}
}
