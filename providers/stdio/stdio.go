// Package stdio is the stdio and stdio-composer providers: a kind backed by any program.
// Per task the provider runs the kind's configured program once, writes one JSON
// [Request] to its stdin and reads one JSON [Response] from its stdout. The exit code is
// the failure class: 0 success, 2 terminal (a retry cannot help), anything else
// transient. The program runs in its own process group with an explicit environment
// (the config's env plus a minimal PATH, never the server's), in a fresh temporary
// directory, under a timeout that kills the whole group; stdout is capped at MaxStdout
// and the tail of stderr goes into the error.
//
// The package imports only webhooksdk: copy it to ship your own program-backed kinds.
package stdio

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// Timeouts of one run.
const (
	// DefaultTimeout applies when the config sets no timeout_seconds.
	DefaultTimeout = 60 * time.Second
	// MaxTimeoutSeconds is the largest timeout_seconds.
	MaxTimeoutSeconds = 3600
)

var (
	//go:embed stdio.kind.json
	leafManifest []byte
	//go:embed stdio-composer.kind.json
	composerManifest []byte
)

// Manifest returns the kind manifest for a stdio kind named kind: the leaf's, or the
// composer's when composer is set. It is the shipped file with its kind renamed.
func Manifest(kind string, composer bool) []byte {
	src, name := leafManifest, "stdio"
	if composer {
		src, name = composerManifest, "stdio-composer"
	}
	// The files open with the kind, so renaming keeps the rest byte for byte.
	rest, ok := bytes.CutPrefix(src, []byte(`{
  "kind": "`+name+`",`))
	if !ok {
		panic("stdio: the embedded manifest does not open with its kind")
	}
	k, _ := json.Marshal(kind)
	return append([]byte(`{
  "kind": `+string(k)+`,`), rest...)
}

// New returns the provider for the stdio kind named kind (version 1), leaf or composer
// alike: the two differ only in their manifests, and the program learns which it serves
// from Request.Reaction ("work" or "compose"). It reads its config from each task, where
// the resource's override is already merged in.
func New(kind string) webhooksdk.Provider { return webhooksdk.WorkFunc(kind, 1, work) }

// work runs the configured program on one task.
func work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	cfg, err := ParseConfig(req.Config)
	if err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(err)
	}
	env := cfg.Environ()
	path, err := LookPath(cfg.Command, env)
	if err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("config.command: %w", err))
	}
	in, err := json.Marshal(Request{Reaction: req.Reaction, Trigger: req.Trigger, TaskType: req.TaskType,
		Attempt: req.Attempt, Resource: req.Resource, Observed: req.Observed, Config: cfg.Settings, Bundle: req.Bundle})
	if err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("encode request: %w", err)
	}
	dir, err := os.MkdirTemp("", "stdio-")
	if err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("work dir: %w", err)
	}
	defer os.RemoveAll(dir)
	res, err := Exec(ctx, Proc{Path: path, Args: cfg.Args, Env: env, Dir: dir, Stdin: in, Timeout: cfg.Timeout()})
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	if err := Failure(cfg.Command, cfg.Timeout(), res); err != nil {
		return webhooksdk.Outcome{}, err
	}
	return decodeResponse(res.Stdout)
}

// Failure classifies a finished run: nil for exit 0; terminal for exit 2 or a stdout
// over MaxStdout; transient otherwise. The message carries the stderr tail.
func Failure(name string, timeout time.Duration, res Result) error {
	detail := ""
	if s := strings.TrimSpace(res.StderrTail); s != "" {
		detail = ": stderr: " + s
	}
	switch {
	case res.Overflow:
		return webhooksdk.Terminal(fmt.Errorf("%s: stdout over %d bytes, killed%s", name, MaxStdout, detail))
	case res.TimedOut:
		return fmt.Errorf("%s: no exit within %s, process group killed%s", name, timeout, detail)
	case res.ExitCode == 0:
		return nil
	case res.ExitCode == 2:
		return webhooksdk.Terminal(fmt.Errorf("%s: exit 2 (terminal)%s", name, detail))
	default:
		return fmt.Errorf("%s: exit %d%s", name, res.ExitCode, detail)
	}
}

func decodeResponse(stdout []byte) (webhooksdk.Outcome, error) {
	if len(bytes.TrimSpace(stdout)) == 0 {
		return webhooksdk.Outcome{}, nil
	}
	var r Response
	dec := json.NewDecoder(bytes.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("stdout: not one JSON response: %w", err))
	}
	if dec.More() {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New("stdout: more than one JSON value"))
	}
	out := webhooksdk.Outcome{Status: r.Status, Conditions: r.Conditions, Children: r.Children, Edges: r.Edges}
	if err := out.Validate(); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("stdout: %w", err))
	}
	return out, nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseConfig decodes and checks the effective provider config; an error names the
// field.
func ParseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
	}
	if c.Command == "" {
		return c, errors.New("config.command: required (the program to run)")
	}
	if err := CheckRun(c.Env, c.TimeoutSeconds); err != nil {
		return c, fmt.Errorf("config.%w", err)
	}
	if len(c.Settings) > 0 && !bytes.HasPrefix(bytes.TrimSpace(c.Settings), []byte("{")) {
		return c, errors.New("config.settings: must be an object")
	}
	return c, nil
}

// CheckRun checks an env and timeout_seconds; an error starts with the field's name.
func CheckRun(env map[string]string, timeoutSeconds int) error {
	for k, v := range env {
		if !envName.MatchString(k) {
			return fmt.Errorf("env: %q is not a variable name", k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("env.%s: contains NUL", k)
		}
	}
	if timeoutSeconds < 0 || timeoutSeconds > MaxTimeoutSeconds {
		return fmt.Errorf("timeout_seconds: %d outside 1..%d", timeoutSeconds, MaxTimeoutSeconds)
	}
	return nil
}

// Timeout is the config's timeout_seconds, or DefaultTimeout.
func (c Config) Timeout() time.Duration { return Timeout(c.TimeoutSeconds) }

// Timeout turns timeout_seconds into a duration; 0 is DefaultTimeout.
func Timeout(seconds int) time.Duration {
	if seconds == 0 {
		return DefaultTimeout
	}
	return time.Duration(seconds) * time.Second
}

// Environ is the program's environment: the config's env, plus PATH=MinimalPath unless
// env sets PATH.
func (c Config) Environ() []string { return Environ(c.Env) }

// Environ turns env into "K=V" entries, adding PATH=MinimalPath unless env sets PATH.
func Environ(env map[string]string) []string {
	out := make([]string, 0, len(env)+1)
	if _, ok := env["PATH"]; !ok {
		out = append(out, "PATH="+MinimalPath)
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// LookPath resolves name against the PATH in env (the program's, not the server's); a
// name with a slash is used as is.
func LookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, executable(name)
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		if p := filepath.Join(dir, name); executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %q", name, path)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}
