package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestRunGoAndMissing runs the driver for a few tasks against the Go SDK's
// bench server, beside an SDK whose server file does not exist: that one is
// skipped with a line saying so, the Go one measured and reported as the
// baseline of the ratios.
func TestRunGoAndMissing(t *testing.T) {
	cfg := defaultConfig()
	cfg.Root = "../.."
	cfg.SDKs = []SDK{sdks[0], {Name: "cobol", File: "sdk/cobol/bench/server.cbl", Cmd: []string{"false"}}}
	cfg.Rounds, cfg.Singles, cfg.Batches, cfg.Concurrency = 2, 40, 4, 2
	var out, errOut bytes.Buffer
	if err := run(context.Background(), cfg, &out, &errOut); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, &out, &errOut)
	}
	t.Logf("stdout:\n%s", &out)
	for _, want := range []string{
		"cobol       skipped: sdk/cobol/bench/server.cbl does not exist (yet)\n",
		"round 1:  go ",
		"round 2:  go ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The Go SDK is its own baseline: its ratios are 1.
	if !regexp.MustCompile(`(?m)^go +[0-9.]+ +[0-9.]+ +1\.00 +(1\.00|-) +[0-9.]+ +[0-9.]+ +1\.00 +(1\.00|-)$`).MatchString(out.String()) {
		t.Errorf("no report line for go with ratios 1.00")
	}
}

func TestRunRefuses(t *testing.T) {
	cfg := defaultConfig()
	cfg.Root = "../.."
	cfg.SDKs = []SDK{{Name: "cobol", File: "sdk/cobol/bench/server.cbl", Cmd: []string{"false"}}}
	var out bytes.Buffer
	if err := run(context.Background(), cfg, &out, &out); err == nil || !strings.Contains(err.Error(), "no SDK's bench server exists") {
		t.Errorf("run with no server: %v", err)
	}
	cfg.BatchSize = 1
	if err := run(context.Background(), cfg, &out, &out); err == nil || !strings.Contains(err.Error(), "-batch-size 1: must be at least 2") {
		t.Errorf("run with -batch-size 1: %v", err)
	}
}
