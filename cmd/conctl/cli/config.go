package cli

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// EnvConfig names conctl's config file, overriding the XDG path.
const EnvConfig = "CONVERGE_CONFIG"

// Config is conctl's config file: named contexts, one of them current.
type Config struct {
	CurrentContext string    `yaml:"current-context,omitempty"`
	Contexts       []Context `yaml:"contexts,omitempty"`
}

// Context is one named server conctl can talk to, and how to authenticate.
type Context struct {
	Name   string `yaml:"name"`
	Server string `yaml:"server,omitempty"`
	// Token is sent as the bearer token; TokenCommand, run by /bin/sh -c
	// instead, prints it (its stdout, trimmed). At most one is set.
	Token        string `yaml:"token,omitempty"`
	TokenCommand string `yaml:"token-command,omitempty"`
	// CertificateAuthority is a PEM file of the CAs to trust for an https
	// server, instead of the system's.
	CertificateAuthority string `yaml:"certificate-authority,omitempty"`
	// Namespace is the namespace of namespaced objects when neither -n
	// nor $CONVERGE_NAMESPACE names one.
	Namespace string `yaml:"namespace,omitempty"`
}

// configFile is a config file and where it lives.
type configFile struct {
	path string
	cfg  Config
}

// configPath is where the config file is: $CONVERGE_CONFIG, else
// $XDG_CONFIG_HOME/converge/config.yaml, else ~/.config/converge/config.yaml;
// "" when none of those variables is set.
func configPath(getenv func(string) string) string {
	if p := getenv(EnvConfig); p != "" {
		return p
	}
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "converge", "config.yaml")
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".config", "converge", "config.yaml")
	}
	return ""
}

// loadConfig reads the config file; a missing file (or none to look for)
// is an empty config.
func loadConfig(getenv func(string) string) (*configFile, error) {
	f := &configFile{path: configPath(getenv)}
	if f.path == "" {
		return f, nil
	}
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read config file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f.cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config file %s: %w", f.path, err)
	}
	return f, f.check()
}

// check validates the config: unique, non-empty names, at most one token
// source each, and a current context that exists.
func (f *configFile) check() error {
	seen := map[string]bool{}
	for i, c := range f.cfg.Contexts {
		switch {
		case c.Name == "":
			return fmt.Errorf("config file %s: contexts[%d].name is empty", f.path, i)
		case seen[c.Name]:
			return fmt.Errorf("config file %s: contexts[%d].name: context %q is defined twice", f.path, i, c.Name)
		case c.Token != "" && c.TokenCommand != "":
			return fmt.Errorf("config file %s: contexts[%d] (%s): token and token-command are both set; keep one", f.path, i, c.Name)
		}
		seen[c.Name] = true
	}
	if cur := f.cfg.CurrentContext; cur != "" && !seen[cur] {
		return fmt.Errorf("config file %s: current-context %q names no context", f.path, cur)
	}
	return nil
}

// find returns the named context.
func (f *configFile) find(name string) (*Context, bool) {
	i := slices.IndexFunc(f.cfg.Contexts, func(c Context) bool { return c.Name == name })
	if i < 0 {
		return nil, false
	}
	return &f.cfg.Contexts[i], true
}

// save writes the config file with mode 0600 (it may hold tokens),
// creating its directory (0700) if need be; an existing file is replaced
// whole, through a temporary file renamed over it.
func (f *configFile) save() error {
	if f.path == "" {
		return fmt.Errorf("cannot find conctl's config file: set $%s, $XDG_CONFIG_HOME or $HOME", EnvConfig)
	}
	if err := f.check(); err != nil {
		return err
	}
	data, err := yaml.Marshal(f.cfg)
	if err != nil {
		return err
	}
	dir := filepath.Dir(f.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot write config file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("cannot write config file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write config file: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write config file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cannot write config file: %w", err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("cannot write config file: %w", err)
	}
	return nil
}

// context returns the context in force: the one --context names, else
// the current one; nil when neither is set.
func (f *configFile) context(flag string) (*Context, error) {
	name := flag
	if name == "" {
		name = f.cfg.CurrentContext
	}
	if name == "" {
		return nil, nil
	}
	c, ok := f.find(name)
	if !ok {
		return nil, fmt.Errorf("--context %q: no such context in %s (conctl config get-contexts lists them)", name, f.path)
	}
	return c, nil
}

// runTokenCommand runs a context's token-command and returns its stdout,
// trimmed.
func runTokenCommand(ctx context.Context, path string, c *Context) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.TokenCommand)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			msg = ": " + msg
		}
		return "", fmt.Errorf("config file %s: context %q: token-command failed: %v%s", path, c.Name, err, msg)
	}
	tok := strings.TrimSpace(stdout.String())
	if tok == "" {
		return "", fmt.Errorf("config file %s: context %q: token-command printed no token", path, c.Name)
	}
	return tok, nil
}

// clientConfig resolves the client's settings: each from its flag, else
// its environment variable, else the config file's context, else the
// default. origin names where the server URL came from, for errors.
func (a *app) clientConfig() (cfg ClientConfig, origin string, err error) {
	f, err := loadConfig(a.getenv)
	if err != nil {
		return cfg, "", err
	}
	ctx, err := f.context(a.contextName)
	if err != nil {
		return cfg, "", err
	}
	if ctx == nil {
		ctx = &Context{}
	}
	from := func(key string) string { return fmt.Sprintf("config file %s: context %q: %s", f.path, ctx.Name, key) }

	cfg = ClientConfig{Timeout: a.timeout, Retries: a.retries, UserAgent: "conctl/" + clientVersion()}
	switch {
	case a.server != "":
		cfg.Server, origin = a.server, "--server"
	case a.getenv(EnvServer) != "":
		cfg.Server, origin = a.getenv(EnvServer), "$"+EnvServer
	case ctx.Server != "":
		cfg.Server, origin = ctx.Server, from("server")
	default:
		cfg.Server, origin = ServerDefault, "the default server"
	}
	switch {
	case a.token != "":
		cfg.Token = a.token
	case a.getenv(EnvToken) != "":
		cfg.Token = a.getenv(EnvToken)
	case ctx.Token != "":
		cfg.Token = ctx.Token
	case ctx.TokenCommand != "":
		tctx, cancel := context.WithTimeout(context.Background(), cmp.Or(a.timeout, TimeoutDefault))
		defer cancel()
		if cfg.Token, err = runTokenCommand(tctx, f.path, ctx); err != nil {
			return cfg, "", err
		}
	}
	if cfg.Namespace, a.nsExplicit, err = a.resolveNamespace(ctx, from("namespace")); err != nil {
		return cfg, "", err
	}
	ca, caOrigin := a.caFile, "--certificate-authority"
	if ca == "" {
		ca, caOrigin = ctx.CertificateAuthority, from("certificate-authority")
	}
	if ca != "" {
		if cfg.HTTPClient, err = caClient(ca, a.timeout); err != nil {
			return cfg, "", fmt.Errorf("%s: %w", caOrigin, err)
		}
	}
	return cfg, origin, nil
}

// caClient is an HTTP client trusting only the CAs of the PEM file path.
func caClient(path string, timeout time.Duration) (*http.Client, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}
