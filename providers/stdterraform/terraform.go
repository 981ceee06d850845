package stdterraform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/convergeplane/converge/webhooksdk"
)

const (
	// tailBytes bounds the terraform output kept for a condition or an error.
	tailBytes = 4 << 10
	// maxOutputs bounds terraform output -json.
	maxOutputs = 1 << 20
	stateFile  = "terraform.tfstate"
	planFile   = "converge.tfplan"
)

// apply plans the module and applies the plan if it changes anything; the outputs become
// the status, the plan and apply output (tails) the conditions.
func (p *provider) apply(ctx context.Context, dir string, sp spec, lim sourceLimits) (webhooksdk.Outcome, error) {
	run, err := p.prepare(ctx, dir, sp, lim)
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	defer os.RemoveAll(run)
	if err := p.init(ctx, run); err != nil {
		return webhooksdk.Outcome{}, err
	}
	if out, err := p.tf(ctx, run, nil, "validate", "-no-color"); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("terraform validate: %w\n%s", err, out))
	}
	plan, err := p.tf(ctx, run, nil, "plan", "-input=false", "-no-color", "-detailed-exitcode", "-out="+planFile)
	var exit *exec.ExitError
	changes := errors.As(err, &exit) && exit.ExitCode() == 2
	if err != nil && !changes {
		return webhooksdk.Outcome{}, fmt.Errorf("terraform plan: %w\n%s", err, plan)
	}
	planned := webhooksdk.Condition{Type: "Planned", Status: "True", Reason: "NoChanges", Message: plan}
	ready := webhooksdk.Condition{Type: "Ready", Status: "True", Reason: "UpToDate",
		Message: "no changes: the infrastructure matches the module"}
	if changes {
		out, err := p.tf(ctx, run, nil, "apply", "-input=false", "-no-color", "-auto-approve", planFile)
		if err != nil {
			return webhooksdk.Outcome{}, fmt.Errorf("terraform apply: %w\n%s", err, out)
		}
		planned.Reason = "Changes"
		ready.Reason, ready.Message = "Applied", out
	}
	status, err := p.outputs(ctx, run)
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	return webhooksdk.Outcome{Status: status, Conditions: []webhooksdk.Condition{planned, ready}}, nil
}

// destroy destroys what the resource's state holds. A resource never applied (no state)
// has nothing to destroy, nor has one whose state is already empty.
func (p *provider) destroy(ctx context.Context, dir string, raw json.RawMessage, lim sourceLimits) error {
	if _, err := os.Stat(filepath.Join(dir, stateFile)); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	sp, err := parseSpec(raw)
	if err != nil {
		return webhooksdk.Terminal(fmt.Errorf("destroy needs the module: %w", err))
	}
	run, err := p.prepare(ctx, dir, sp, lim)
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)
	if err := p.init(ctx, run); err != nil {
		return err
	}
	if out, err := p.tf(ctx, run, nil, "apply", "-destroy", "-input=false", "-no-color", "-auto-approve"); err != nil {
		return fmt.Errorf("terraform destroy: %w\n%s", err, out)
	}
	return nil
}

// prepare makes a fresh run directory under dir: the module fetched from spec.source, a
// local backend pointing at dir's state, and the spec's variables.
func (p *provider) prepare(ctx context.Context, dir string, sp spec, lim sourceLimits) (string, error) {
	if p.pluginCache != "" {
		if err := os.MkdirAll(p.pluginCache, 0o700); err != nil {
			return "", fmt.Errorf("plugin cache: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	run, err := os.MkdirTemp(dir, "run-")
	if err != nil {
		return "", fmt.Errorf("run directory: %w", err)
	}
	vars := sp.Vars
	if vars == nil {
		vars = map[string]json.RawMessage{}
	}
	backend := map[string]any{"terraform": map[string]any{"backend": map[string]any{
		"local": map[string]string{"path": filepath.Join(dir, stateFile)}}}}
	err = p.fetchModule(ctx, sp.Source, run, lim)
	if err == nil {
		err = writeJSON(filepath.Join(run, "converge_backend.tf.json"), backend)
	}
	if err == nil {
		err = writeJSON(filepath.Join(run, "converge.auto.tfvars.json"), vars)
	}
	if err != nil {
		os.RemoveAll(run)
		return "", err
	}
	return run, nil
}

// init runs terraform init; a module terraform cannot parse is terminal.
func (p *provider) init(ctx context.Context, run string) error {
	out, err := p.tf(ctx, run, nil, "init", "-input=false", "-no-color")
	if err == nil {
		return nil
	}
	err = fmt.Errorf("terraform init: %w\n%s", err, out)
	if strings.Contains(strings.Join(strings.Fields(out), " "), "problems with the configuration") {
		return webhooksdk.Terminal(err)
	}
	return err
}

// outputs reads terraform output -json as the status {"outputs": {name: value}},
// leaving sensitive outputs out: the status is readable through the API.
func (p *provider) outputs(ctx context.Context, run string) (json.RawMessage, error) {
	stdout := &capped{max: maxOutputs}
	if out, err := p.tf(ctx, run, stdout, "output", "-json", "-no-color"); err != nil {
		return nil, fmt.Errorf("terraform output: %w\n%s", err, out)
	}
	var outs map[string]struct {
		Sensitive bool            `json:"sensitive"`
		Value     json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &outs); err != nil {
		return nil, fmt.Errorf("terraform output: %w", err)
	}
	values := map[string]json.RawMessage{}
	for name, o := range outs {
		if !o.Sensitive {
			values[name] = o.Value
		}
	}
	status, err := json.Marshal(map[string]any{"outputs": values})
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return status, nil
}

// tf runs terraform in run, in its own process group, and returns the tail of its
// output (stdout too unless stdout is given). When ctx ends the group is interrupted so
// terraform can release its lock and write its state, and killed after the grace.
func (p *provider) tf(ctx context.Context, run string, stdout io.Writer, args ...string) (string, error) {
	out := &tail{max: tailBytes}
	cmd := exec.CommandContext(ctx, p.binary, args...)
	cmd.Dir = run
	cmd.Env = p.env(run)
	cmd.Stdout, cmd.Stderr = out, out
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = p.grace
	err := cmd.Run()
	if cmd.Process != nil {
		// Whatever is left of the group (a provisioner's program, a plugin) goes too.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("stopped at the task deadline (%w): %w", ctx.Err(), err)
	}
	return out.String(), err
}

// env is terraform's whole environment: nothing of the server's leaks in, and nothing
// calls home (CHECKPOINT_DISABLE).
func (p *provider) env(run string) []string {
	env := []string{"PATH=" + p.path, "HOME=" + run, "TMPDIR=" + run,
		"TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1"}
	if p.pluginCache != "" {
		env = append(env, "TF_PLUGIN_CACHE_DIR="+p.pluginCache)
	}
	return env
}

func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// tail keeps the last max bytes written, cut at a line start.
type tail struct {
	max int
	buf []byte
	cut bool
}

func (t *tail) Write(b []byte) (int, error) {
	t.buf = append(t.buf, b...)
	if len(t.buf) > 2*t.max {
		n := copy(t.buf, t.buf[len(t.buf)-t.max:])
		t.buf, t.cut = t.buf[:n], true
	}
	return len(b), nil
}

func (t *tail) String() string {
	b, cut := t.buf, t.cut
	if len(b) > t.max {
		b, cut = b[len(b)-t.max:], true
	}
	if cut {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
		return "…\n" + strings.TrimSpace(string(b))
	}
	return strings.TrimSpace(string(b))
}

// capped is a buffer refusing writes past max bytes.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(b []byte) (int, error) {
	if c.Len()+len(b) > c.max {
		return 0, fmt.Errorf("more than %d bytes", c.max)
	}
	return c.Buffer.Write(b)
}
