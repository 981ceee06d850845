package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// startProvider registers the demo's endpoint for kinds and starts the
// provider bin serving it, logging to a file in env.DataDir. stop ends the
// process; it is nil when none was started.
func startProvider(ctx context.Context, c *client, d Demo, bin string, kinds []kind, env Env) (stop func(), err error) {
	addr, err := freeLoopback()
	if err != nil {
		return nil, err
	}
	providerURL := "http://" + addr + "/"
	secret, err := c.registerEndpoint(ctx, d.name, providerURL, kinds)
	if err != nil {
		return nil, fmt.Errorf("register the provider endpoint: %w", err)
	}
	fmt.Fprintf(env.Out, "registered endpoint %q -> %s\n", d.name, providerURL)

	// The provider logs to a file: on a terminal its lines would tear the
	// view drawn in place.
	logPath := filepath.Join(env.DataDir, d.binary+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("provider log: %w", err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "PROVIDER_ADDR="+addr, "PROVIDER_SECRETS="+secret), d.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }() //nolint:errcheck // its log says why
	fmt.Fprintf(env.Out, "started %s (pid %d) on %s, logging to %s\n", d.binary, cmd.Process.Pid, addr, logPath)
	return func() {
		cmd.Process.Signal(os.Interrupt) //nolint:errcheck // it may have exited already
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill() //nolint:errcheck // as above
			<-exited
		}
	}, nil
}

// providerBinary finds the provider binary name in env.BinDir (make build
// puts it next to converge), else on env's PATH.
func providerBinary(name string, env Env) (string, error) {
	p, err := lookPath(name, env)
	if err == nil {
		return p, nil
	}
	where := "on PATH"
	if env.BinDir != "" {
		where = "in " + env.BinDir + " or on PATH"
	}
	return "", fmt.Errorf("the demo runs the example provider %s as its own process, and there is none %s: "+
		"run `make build` (it builds bin/converge and bin/%s), or `make demo`", name, where, name)
}

// lookPath finds the executable name in env.BinDir, else in a directory
// of env's PATH.
func lookPath(name string, env Env) (string, error) {
	dirs := filepath.SplitList(env.Getenv("PATH"))
	if env.BinDir != "" {
		dirs = append([]string{env.BinDir}, dirs...)
	}
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s found", name)
}

// objects are what the provider's `objects` command prints.
type objects struct {
	Manifests       []json.RawMessage `json:"manifests"`
	ProviderConfigs []json.RawMessage `json:"providerconfigs"`
	Bindings        []json.RawMessage `json:"bindings"`
	Resources       []json.RawMessage `json:"resources"`
	kinds           []kind            // of each manifest
}

type kind struct {
	Kind        string `json:"kind"`
	KindVersion int    `json:"kind_version"`
}

// providerObjects asks the provider binary for the manifests of the kinds
// it serves and its sample resources.
func providerObjects(ctx context.Context, bin string, args []string) (objects, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return objects{}, fmt.Errorf("%s objects: %w: %s (is it out of date? run `make build`)", bin, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var o objects
	if err := json.Unmarshal(stdout, &o); err != nil {
		return objects{}, fmt.Errorf("%s objects: %w", bin, err)
	}
	if len(o.Manifests) == 0 || len(o.Resources) == 0 {
		return objects{}, fmt.Errorf("%s objects: want manifests and resources, got %d and %d", bin, len(o.Manifests), len(o.Resources))
	}
	for i, m := range o.Manifests {
		var k kind
		if err := json.Unmarshal(m, &k); err != nil || k.Kind == "" || k.KindVersion == 0 {
			return objects{}, fmt.Errorf("%s objects: manifest %d names no kind and kind_version (%v)", bin, i+1, err)
		}
		o.kinds = append(o.kinds, k)
	}
	return o, nil
}

func freeLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
