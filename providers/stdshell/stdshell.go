// Package stdshell is the stdshell provider: a script carried in the resource's spec,
// run once per reconcile as `<interpreter> [args…] <script file>`. interpreter, args,
// env and timeout_seconds come from the spec, with kind-wide defaults in the provider
// config. The run has stdio's isolation (its own process group killed at the timeout, an
// explicit environment plus a minimal PATH, a fresh temporary directory, stdout capped
// at stdio.MaxStdout). Exit 0 records the exit code and the tails of stdout and stderr in
// status with a Ready condition; exit 2 is terminal; anything else, or a timeout, is
// transient.
//
// The package imports only webhooksdk and the stdio provider's process runner.
package stdshell

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/convergeplane/converge/providers/stdio"
	"github.com/convergeplane/converge/webhooksdk"
)

// DefaultInterpreter runs the script when neither spec nor config names one.
const DefaultInterpreter = "/bin/sh"

//go:embed stdshell.kind.json
var manifest []byte

// Manifest returns the stdshell kind manifest.
func Manifest() []byte { return bytes.Clone(manifest) }

// Options are how a script runs; the spec's fields override the config's.
type Options struct {
	// Interpreter runs the script (default DefaultInterpreter).
	Interpreter string `json:"interpreter,omitempty"`
	// Args go between the interpreter and the script file.
	Args []string `json:"args,omitempty"`
	// Env is the script's environment, plus PATH=stdio.MinimalPath unless it sets PATH.
	// The spec's entries are merged over the config's.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutSeconds bounds the run (default stdio.DefaultTimeout).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// Spec is a stdshell resource's spec.
type Spec struct {
	// Script is the script text.
	Script string `json:"script"`
	Options
}

// Status is what a successful run records.
type Status struct {
	// ExitCode is the script's exit code (0).
	ExitCode int `json:"exit_code"`
	// Stdout and Stderr are the last stdio.TailBytes of each stream.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// DurationMS is how long the run took.
	DurationMS int64 `json:"duration_ms"`
}

// New returns the provider for kind (version 1). It reads its defaults from each task's
// effective config.
func New(kind string) webhooksdk.Provider { return webhooksdk.WorkFunc(kind, 1, work) }

// work runs one task's script.
func work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var cfg Options
	if err := decodeStrict(req.Config, &cfg); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("config: %w", err))
	}
	if err := stdio.CheckRun(cfg.Env, cfg.TimeoutSeconds); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("config.%w", err))
	}
	var spec Spec
	if err := decodeStrict(req.Resource.Spec, &spec); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("spec: %w", err))
	}
	if spec.Script == "" {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New("spec.script: required"))
	}
	if err := stdio.CheckRun(spec.Env, spec.TimeoutSeconds); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("spec.%w", err))
	}
	opts := merge(cfg, spec.Options)
	env := stdio.Environ(opts.Env)
	interp, err := stdio.LookPath(opts.Interpreter, env)
	if err != nil {
		field := "config.interpreter"
		if spec.Interpreter != "" {
			field = "spec.interpreter"
		}
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("%s: %w", field, err))
	}

	dir, err := os.MkdirTemp("", "stdshell-")
	if err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("work dir: %w", err)
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte(spec.Script), 0o700); err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("write script: %w", err)
	}
	timeout := stdio.Timeout(opts.TimeoutSeconds)
	start := time.Now()
	res, err := stdio.Exec(ctx, stdio.Proc{Path: interp, Args: append(opts.Args, script), Env: env,
		Dir: dir, Timeout: timeout})
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	if err := stdio.Failure("script", timeout, res); err != nil {
		return webhooksdk.Outcome{}, err
	}
	st, err := json.Marshal(Status{ExitCode: res.ExitCode, Stdout: res.StdoutTail, Stderr: res.StderrTail,
		DurationMS: time.Since(start).Milliseconds()})
	if err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("encode status: %w", err)
	}
	return webhooksdk.Outcome{Status: st, Conditions: []webhooksdk.Condition{{Type: "Ready", Status: "True",
		Reason: "Exited", Message: "the script exited 0"}}}, nil
}

// merge lays the spec's options over the config's defaults.
func merge(cfg, spec Options) Options {
	out := cfg
	if spec.Interpreter != "" {
		out.Interpreter = spec.Interpreter
	}
	if out.Interpreter == "" {
		out.Interpreter = DefaultInterpreter
	}
	if spec.Args != nil {
		out.Args = spec.Args
	}
	out.Args = append([]string(nil), out.Args...)
	if spec.TimeoutSeconds != 0 {
		out.TimeoutSeconds = spec.TimeoutSeconds
	}
	out.Env = maps.Clone(cfg.Env)
	if out.Env == nil {
		out.Env = map[string]string{}
	}
	maps.Copy(out.Env, spec.Env)
	return out
}

func decodeStrict(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
