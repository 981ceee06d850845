package stdterraform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// stateKeyPlaceholder is what a raw backend's text says where the resource's state key
// goes.
const stateKeyPlaceholder = "__CONVERGE_STATE_KEY__"

// defaultStatePrefix is where a remote backend keeps the resources' states when the
// config names no state_prefix.
const defaultStatePrefix = "converge"

// backendConfig is the provider config's backend block: one of s3, gcs, azurerm or raw.
// None of them carries credentials: terraform reads its cloud's ambient chain.
type backendConfig struct {
	S3          *s3Backend      `json:"s3"`
	GCS         *gcsBackend     `json:"gcs"`
	AzureRM     *azurermBackend `json:"azurerm"`
	Raw         string          `json:"raw"`
	StatePrefix string          `json:"state_prefix"`
}

type s3Backend struct {
	Bucket       string `json:"bucket"`
	Region       string `json:"region"`
	Endpoint     string `json:"endpoint"`
	UsePathStyle bool   `json:"use_path_style"`
	KMSKeyID     string `json:"kms_key_id"`
}

type gcsBackend struct {
	Bucket        string `json:"bucket"`
	KMSEncryption string `json:"kms_encryption_key"`
}

type azurermBackend struct {
	StorageAccountName string `json:"storage_account_name"`
	ContainerName      string `json:"container_name"`
	ResourceGroupName  string `json:"resource_group_name"`
	SubscriptionID     string `json:"subscription_id"`
	TenantID           string `json:"tenant_id"`
	UseAzureADAuth     *bool  `json:"use_azuread_auth"`
}

// backend is where one resource's state lives, ready to be written into a run directory.
type backend struct {
	// local is the default backend: a state file in the resource's directory.
	local bool
	// file and body are the generated backend file, written beside the module.
	file string
	body []byte
	// workspace is the resource's workspace (its id) on a remote backend, empty on the
	// local and raw ones: init selects it, creating it if need be, and destroy deletes
	// it, state object and all.
	workspace string
	// envPrefixes name the server's environment variables terraform gets: the backend's
	// cloud credential chain.
	envPrefixes []string
}

var statePrefixRE = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)

// newBackend is the backend for the resource whose local directory is dir (and id its
// base name), per the config's backend block; with none, the local backend in dir.
func newBackend(cfg *backendConfig, dir string) (backend, error) {
	if cfg == nil {
		b, err := jsonBackend("local", map[string]any{"path": filepath.Join(dir, stateFile)}, "", nil)
		b.local = true
		return b, err
	}
	id := filepath.Base(dir)
	prefix := cfg.StatePrefix
	if prefix == "" {
		prefix = defaultStatePrefix
	}
	if !statePrefixRE.MatchString(prefix) || strings.Contains("/"+prefix+"/", "/../") || strings.Contains("/"+prefix+"/", "/./") {
		return backend{}, fmt.Errorf("config.backend.state_prefix: %q is not a relative slash-separated path", cfg.StatePrefix)
	}
	set := 0
	for _, on := range []bool{cfg.S3 != nil, cfg.GCS != nil, cfg.AzureRM != nil, cfg.Raw != ""} {
		if on {
			set++
		}
	}
	if set != 1 {
		return backend{}, errors.New("config.backend: set exactly one of s3, gcs, azurerm and raw")
	}
	switch {
	case cfg.S3 != nil:
		s := cfg.S3
		if s.Bucket == "" {
			return backend{}, errors.New("config.backend.s3.bucket: required")
		}
		// key sits under workspace_key_prefix/<workspace>/; use_lockfile is S3's native
		// lock (a .tflock object beside the state, Terraform >= 1.10).
		block := map[string]any{"bucket": s.Bucket, "key": stateFile, "workspace_key_prefix": prefix,
			"use_lockfile": true, "encrypt": true}
		setIf(block, "region", s.Region)
		setIf(block, "kms_key_id", s.KMSKeyID)
		if s.Endpoint != "" {
			block["endpoints"] = map[string]string{"s3": s.Endpoint}
		}
		if s.UsePathStyle {
			block["use_path_style"] = true
		}
		return jsonBackend("s3", block, id, []string{"AWS_"})
	case cfg.GCS != nil:
		g := cfg.GCS
		if g.Bucket == "" {
			return backend{}, errors.New("config.backend.gcs.bucket: required")
		}
		// The state is <prefix>/<workspace>.tfstate; GCS locks it natively.
		block := map[string]any{"bucket": g.Bucket, "prefix": prefix}
		setIf(block, "kms_encryption_key", g.KMSEncryption)
		return jsonBackend("gcs", block, id, []string{"GOOGLE_"})
	case cfg.AzureRM != nil:
		a := cfg.AzureRM
		if a.StorageAccountName == "" {
			return backend{}, errors.New("config.backend.azurerm.storage_account_name: required")
		}
		if a.ContainerName == "" {
			return backend{}, errors.New("config.backend.azurerm.container_name: required")
		}
		// The state is the blob <key>env:<workspace>; a blob lease locks it.
		block := map[string]any{"storage_account_name": a.StorageAccountName, "container_name": a.ContainerName,
			"key": prefix + ".tfstate", "use_azuread_auth": a.UseAzureADAuth == nil || *a.UseAzureADAuth}
		setIf(block, "resource_group_name", a.ResourceGroupName)
		setIf(block, "subscription_id", a.SubscriptionID)
		setIf(block, "tenant_id", a.TenantID)
		return jsonBackend("azurerm", block, id, []string{"ARM_"})
	default:
		if !strings.Contains(cfg.Raw, stateKeyPlaceholder) {
			return backend{}, fmt.Errorf("config.backend.raw: has no %s placeholder: every resource would share one state", stateKeyPlaceholder)
		}
		body := strings.ReplaceAll(cfg.Raw, stateKeyPlaceholder, prefix+"/"+id)
		return backend{file: "converge_backend.tf", body: []byte(body),
			envPrefixes: []string{"AWS_", "GOOGLE_", "ARM_"}}, nil
	}
}

func setIf(block map[string]any, name, value string) {
	if value != "" {
		block[name] = value
	}
}

// jsonBackend is a backend written as converge_backend.tf.json.
func jsonBackend(typ string, block map[string]any, workspace string, env []string) (backend, error) {
	body, err := json.Marshal(map[string]any{"terraform": map[string]any{"backend": map[string]any{typ: block}}})
	if err != nil {
		return backend{}, fmt.Errorf("backend: %w", err)
	}
	return backend{file: "converge_backend.tf.json", body: body, workspace: workspace, envPrefixes: env}, nil
}

// write puts the backend file into the run directory.
func (b backend) write(run string) error {
	if err := os.WriteFile(filepath.Join(run, b.file), b.body, 0o600); err != nil {
		return fmt.Errorf("%s: %w", b.file, err)
	}
	return nil
}

// env is what terraform's environment gains for this backend: the server's variables of
// the backend's credential chain.
func (b backend) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		for _, p := range b.envPrefixes {
			if strings.HasPrefix(kv, p) {
				env = append(env, kv)
			}
		}
	}
	return env
}

// lockArgs is terraform's -lock-timeout for a config's lock_timeout_secs.
func lockArgs(secs int) []string {
	return []string{"-lock-timeout=" + strconv.Itoa(secs) + "s"}
}

// stateExists reports whether the remote backend holds the resource's workspace. It
// initialises an empty directory holding only the backend, so it needs no module: a
// resource never applied is deleted even when its spec is unusable.
func (p *provider) stateExists(ctx context.Context, probe *workdir, b backend) (bool, error) {
	if err := p.init(ctx, probe); err != nil {
		return false, err
	}
	// The whole list, not the tail kept of terraform's output: a backend holds a
	// workspace per resource.
	stdout := &capped{max: maxOutputs}
	if out, err := p.tf(ctx, probe, stdout, "workspace", "list", "-no-color"); err != nil {
		return false, fmt.Errorf("terraform workspace list: %w\n%s", err, out)
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*")) == b.workspace {
			return true, nil
		}
	}
	return false, nil
}
