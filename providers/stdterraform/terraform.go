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

// task is one task's resource: its local directory, the config, the state backend and
// the caps on a fetched module.
type task struct {
	dir     string
	cfg     config
	backend backend
	lim     sourceLimits
}

// workdir is a directory terraform runs in, the binary that runs there, what its
// environment gains beyond the provider's own, and the workspace init selects there
// (empty: the default one).
type workdir struct {
	dir       string
	bin       string
	env       []string
	workspace string
}

// apply plans the module and applies the plan if it changes anything; the outputs become
// the status, the plan and apply output (tails) the conditions.
func (p *provider) apply(ctx context.Context, tk task, sp spec) (webhooksdk.Outcome, error) {
	run, c, err := p.prepare(ctx, tk, sp)
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	defer os.RemoveAll(run.dir)
	if err := p.init(ctx, run); err != nil {
		return webhooksdk.Outcome{}, err
	}
	if out, err := p.tf(ctx, run, nil, "validate", "-no-color"); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("terraform validate: %w\n%s", err, out))
	}
	lock := lockArgs(tk.cfg.LockTimeoutSecs)
	plan, err := p.tf(ctx, run, nil, append([]string{"plan", "-input=false", "-no-color", "-detailed-exitcode", "-out=" + planFile}, lock...)...)
	var exit *exec.ExitError
	changes := errors.As(err, &exit) && exit.ExitCode() == 2
	if err != nil && !changes {
		return webhooksdk.Outcome{}, fmt.Errorf("terraform plan: %w\n%s", err, plan)
	}
	planned := webhooksdk.Condition{Type: "Planned", Status: "True", Reason: "NoChanges", Message: plan}
	ready := webhooksdk.Condition{Type: "Ready", Status: "True", Reason: "UpToDate",
		Message: "no changes: the infrastructure matches the module"}
	if changes {
		out, err := p.tf(ctx, run, nil, append([]string{"apply", "-input=false", "-no-color", "-auto-approve"}, append(lock, planFile)...)...)
		if err != nil {
			return webhooksdk.Outcome{}, fmt.Errorf("terraform apply: %w\n%s", err, out)
		}
		planned.Reason = "Changes"
		ready.Reason, ready.Message = "Applied", out
	}
	status, err := p.outputs(ctx, run, c)
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	return webhooksdk.Outcome{Status: status, Conditions: []webhooksdk.Condition{planned, ready}}, nil
}

// destroy destroys what the resource's state holds. A resource never applied (no state)
// has nothing to destroy, nor has one whose state is already empty. On a remote backend
// the resource's workspace, its state object with it, is deleted afterwards.
func (p *provider) destroy(ctx context.Context, tk task, raw json.RawMessage) error {
	var probe *workdir
	switch {
	case tk.backend.local:
		if _, err := os.Stat(filepath.Join(tk.dir, stateFile)); errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return fmt.Errorf("state: %w", err)
		}
	case tk.backend.workspace != "":
		var err error
		if probe, err = p.probe(ctx, tk); err != nil {
			return err
		}
		defer os.RemoveAll(probe.dir)
		if exists, err := p.stateExists(ctx, probe, tk.backend); err != nil || !exists {
			return err
		}
	}
	sp, err := parseSpec(raw)
	if err != nil {
		return webhooksdk.Terminal(fmt.Errorf("destroy needs the module: %w", err))
	}
	run, _, err := p.prepare(ctx, tk, sp)
	if err != nil {
		return err
	}
	defer os.RemoveAll(run.dir)
	if err := p.init(ctx, run); err != nil {
		return err
	}
	lock := lockArgs(tk.cfg.LockTimeoutSecs)
	if out, err := p.tf(ctx, run, nil, append([]string{"apply", "-destroy", "-input=false", "-no-color", "-auto-approve"}, lock...)...); err != nil {
		return fmt.Errorf("terraform destroy: %w\n%s", err, out)
	}
	if probe == nil {
		return nil
	}
	if out, err := p.tf(ctx, probe, nil, append([]string{"workspace", "delete", "-no-color"}, append(lock, tk.backend.workspace)...)...); err != nil {
		return fmt.Errorf("terraform workspace delete: %w\n%s", err, out)
	}
	return nil
}

// prepare makes a fresh run directory under the resource's directory: the module
// fetched from spec.source, the backend and the spec's variables; and resolves the binary that runs there.
func (p *provider) prepare(ctx context.Context, tk task, sp spec) (*workdir, cli, error) {
	if p.pluginCache != "" {
		if err := os.MkdirAll(p.pluginCache, 0o700); err != nil {
			return nil, cli{}, fmt.Errorf("plugin cache: %w", err)
		}
	}
	run, err := p.runDir(tk)
	if err != nil {
		return nil, cli{}, err
	}
	vars := sp.Vars
	if vars == nil {
		vars = map[string]json.RawMessage{}
	}
	err = p.fetchModule(ctx, sp.Source, run, tk.lim)
	if err == nil {
		err = tk.backend.write(run)
	}
	if err == nil {
		err = writeJSON(filepath.Join(run, "converge.auto.tfvars.json"), vars)
	}
	var c cli
	if err == nil {
		c, err = p.resolveCLI(ctx, tk.cfg, sp.TFVersion, run)
	}
	if err != nil {
		os.RemoveAll(run)
		return nil, cli{}, err
	}
	return &workdir{dir: run, bin: c.path, env: tk.backend.env(), workspace: tk.backend.workspace}, c, nil
}

// probe makes a run directory holding only the backend, in the default workspace, with
// the binary resolved for no module (the newest installed).
func (p *provider) probe(ctx context.Context, tk task) (*workdir, error) {
	run, err := p.runDir(tk)
	if err != nil {
		return nil, err
	}
	err = tk.backend.write(run)
	var c cli
	if err == nil {
		c, err = p.resolveCLI(ctx, tk.cfg, "", run)
	}
	if err != nil {
		os.RemoveAll(run)
		return nil, err
	}
	return &workdir{dir: run, bin: c.path, env: tk.backend.env()}, nil
}

// runDir makes a fresh run-* directory in the resource's directory.
func (p *provider) runDir(tk task) (string, error) {
	if err := os.MkdirAll(tk.dir, 0o700); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	run, err := os.MkdirTemp(tk.dir, "run-")
	if err != nil {
		return "", fmt.Errorf("run directory: %w", err)
	}
	return run, nil
}

// init runs terraform init, then selects the run's workspace, creating it if need be
// (TF_WORKSPACE would not do: init refuses a workspace that does not exist yet once the
// backend holds others); a module terraform cannot parse is terminal.
func (p *provider) init(ctx context.Context, run *workdir) error {
	out, err := p.tf(ctx, run, nil, "init", "-input=false", "-no-color")
	if err != nil {
		err = fmt.Errorf("terraform init: %w\n%s", err, out)
		if strings.Contains(strings.Join(strings.Fields(out), " "), "problems with the configuration") {
			return webhooksdk.Terminal(err)
		}
		return err
	}
	if run.workspace == "" {
		return nil
	}
	if out, err := p.tf(ctx, run, nil, "workspace", "select", "-or-create", "-no-color", run.workspace); err != nil {
		return fmt.Errorf("terraform workspace select: %w\n%s", err, out)
	}
	return nil
}

// outputs reads terraform output -json as the status {"outputs": {name: value}},
// leaving sensitive outputs out: the status is readable through the API. The status
// also names the binary and version that ran.
func (p *provider) outputs(ctx context.Context, run *workdir, c cli) (json.RawMessage, error) {
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
	status, err := json.Marshal(map[string]any{"outputs": values,
		"terraform": map[string]string{"binary": c.name, "version": c.version}})
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return status, nil
}

// tf runs terraform in run, in its own process group, and returns the tail of its
// output (stdout too unless stdout is given). When ctx ends the group is interrupted so
// terraform can release its lock and write its state, and killed after the grace.
func (p *provider) tf(ctx context.Context, run *workdir, stdout io.Writer, args ...string) (string, error) {
	out := &tail{max: tailBytes}
	cmd := exec.CommandContext(ctx, run.bin, args...)
	cmd.Dir = run.dir
	cmd.Env = append(p.env(run.dir), run.env...)
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
