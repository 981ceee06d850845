// Package stdterraform is the stdterraform provider: it applies the Terraform module a
// resource's spec names (terraform init, plan, apply), rolls the module's outputs into
// the resource's status, and runs terraform destroy when the resource is deleted.
//
// The module comes from spec.source (see source.go): a local directory, or an archive
// or a git repository fetched into each run's directory under size caps, checksums and
// archive-path checks.
//
// State is the local backend, one directory per resource:
// <state_dir>/<resource id>/terraform.tfstate, with state_dir from the provider config
// (or the provider's default); or the config's backend (s3, gcs, azurerm, or raw text),
// keyed by the resource's id and locked natively (backend.go). Each run works in a fresh
// copy of the module under <state_dir>/<resource id>, so the module's own directory is
// never written to. An apply holds the state twice over: an in-process lock per
// resource refuses a second apply at once, and terraform's own lock on the state refuses
// one from another process (or makes it wait, up to lock_timeout_secs).
//
// The binary is the terraform in PATH, or, with a versions directory, the terraform or
// tofu version the spec, the module's version file or its required_version picks
// (versions.go).
//
// Terraform runs in its own process group under the task's deadline with an explicit
// environment (none of the server's): at the deadline the group is interrupted, then
// killed.
package stdterraform

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

//go:embed stdterraform.kind.json
var manifest []byte

// Manifest returns the stdterraform kind manifest, as PUT /api/v1/kinds/{kind}/manifest
// takes it.
func Manifest() []byte { return manifest }

// The manifest's reactions.
const (
	reactionApply   = "apply"
	reactionDestroy = "destroy"
)

// Option configures the provider.
type Option func(*provider)

// WithBinary sets the terraform binary, a path or a name looked up in PATH
// (default "terraform").
func WithBinary(path string) Option { return func(p *provider) { p.binary = path } }

// WithStateDir sets the state directory used when the provider config names none
// (default <os.TempDir()>/stdterraform).
func WithStateDir(dir string) Option { return func(p *provider) { p.stateDir = dir } }

// WithPluginCacheDir shares downloaded provider plugins between runs
// (TF_PLUGIN_CACHE_DIR); unset, every run starts with an empty plugin directory.
func WithPluginCacheDir(dir string) Option { return func(p *provider) { p.pluginCache = dir } }

// WithPath sets PATH for terraform and the programs its provisioners run
// (default "/usr/local/bin:/usr/bin:/bin").
func WithPath(path string) Option { return func(p *provider) { p.path = path } }

// WithVersionsDir sets the directory of installed terraform and tofu versions used when
// the provider config names none: <dir>/<binary>/<version>/<binary>. Unset, the
// binary in PATH runs and spec.tf_version is refused.
func WithVersionsDir(dir string) Option { return func(p *provider) { p.versionsDir = dir } }

// WithGrace sets how long terraform has to stop after its interrupt at the deadline
// before its process group is killed (default 5s).
func WithGrace(d time.Duration) Option { return func(p *provider) { p.grace = d } }

// New returns the stdterraform provider serving kind at version 1.
func New(kind string, opts ...Option) webhooksdk.Provider {
	p := &provider{
		kind:     kind,
		binary:   "terraform",
		stateDir: filepath.Join(os.TempDir(), "stdterraform"),
		path:     "/usr/local/bin:/usr/bin:/bin",
		grace:    5 * time.Second,
		held:     map[string]bool{},
	}
	for _, o := range opts {
		o(p)
	}
	// Resolved once: Ready stays cheap, and a binary that is missing parks the kind.
	if bin, err := exec.LookPath(p.binary); err == nil {
		p.binary, p.found = bin, true
	}
	p.found = p.found || p.versionsDir != ""
	return p
}

type provider struct {
	kind        string
	binary      string
	found       bool
	stateDir    string
	pluginCache string
	versionsDir string
	path        string
	caFile      string
	grace       time.Duration

	mu   sync.Mutex
	held map[string]bool // state directories with a run in progress
}

func (p *provider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}

// The Handler finds this hook by type assertion: a mistyped signature would lose it
// silently.
var _ webhooksdk.Readier = (*provider)(nil)

// Ready is false while the terraform binary is missing and no versions directory is set:
// the kind parks rather than fails.
func (p *provider) Ready() bool { return p.found }

// spec is a resource's spec.
type spec struct {
	Source    string                     `json:"source"`
	Vars      map[string]json.RawMessage `json:"vars"`
	TFVersion string                     `json:"tf_version"`
}

// config is the effective provider config.
type config struct {
	StateDir        string         `json:"state_dir"`
	Backend         *backendConfig `json:"backend"`
	LockTimeoutSecs int            `json:"lock_timeout_secs"`
	Binary          string         `json:"binary"`
	VersionsDir     string         `json:"versions_dir"`
}

// errBusy answers a run on a state another run of this process holds; it is transient.
var errBusy = errors.New("another apply holds the state")

func (p *provider) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	cfg, dir, err := p.resourceDir(req.Config, req.Resource.ID)
	if err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(err)
	}
	b, err := newBackend(cfg.Backend, dir)
	if err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(err)
	}
	lim, err := parseSourceLimits(req.Config)
	if err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(err)
	}
	tk := task{dir: dir, cfg: cfg, backend: b, lim: lim}
	if !p.acquire(dir) {
		return webhooksdk.Outcome{}, fmt.Errorf("%w in %s", errBusy, dir)
	}
	defer p.release(dir)
	switch req.Reaction {
	case reactionApply:
		sp, err := parseSpec(req.Resource.Spec)
		if err != nil {
			return webhooksdk.Outcome{}, webhooksdk.Terminal(err)
		}
		return p.apply(ctx, tk, sp)
	case reactionDestroy:
		return webhooksdk.Outcome{}, p.destroy(ctx, tk, req.Resource.Spec)
	default:
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("unknown reaction %q (want %q or %q)", req.Reaction, reactionApply, reactionDestroy))
	}
}

// resourceDir is the config and the directory holding the resource's local state and
// its runs' directories.
func (p *provider) resourceDir(raw json.RawMessage, id string) (config, string, error) {
	var cfg config
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return cfg, "", fmt.Errorf("config: %w", err)
		}
	}
	if cfg.LockTimeoutSecs < 0 {
		return cfg, "", fmt.Errorf("config.lock_timeout_secs: %d is negative", cfg.LockTimeoutSecs)
	}
	root := p.stateDir
	if cfg.StateDir != "" {
		if !filepath.IsAbs(cfg.StateDir) {
			return cfg, "", fmt.Errorf("config.state_dir: %q is not an absolute path", cfg.StateDir)
		}
		root = cfg.StateDir
	}
	// The id becomes a path element: refuse anything that could leave root.
	if id == "" || id == "." || id == ".." || filepath.Base(id) != id {
		return cfg, "", fmt.Errorf("resource.id: %q cannot name a state directory", id)
	}
	return cfg, filepath.Join(root, id), nil
}

func parseSpec(raw json.RawMessage) (spec, error) {
	var sp spec
	if err := json.Unmarshal(raw, &sp); err != nil {
		return sp, fmt.Errorf("spec: %w", err)
	}
	if _, err := parseSource(sp.Source); err != nil {
		return sp, fmt.Errorf("spec.source: %w", err)
	}
	return sp, nil
}

func (p *provider) acquire(dir string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[dir] {
		return false
	}
	p.held[dir] = true
	return true
}

func (p *provider) release(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.held, dir)
}
