package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/convergeplane/converge/examples/quickstart"
)

// demoEndpoint is the name the demo registers its provider under.
const demoEndpoint = "quickstart"

// runDemo starts the quickstart provider as its own process, registers its
// endpoint, applies the quickstart kinds and a site, and prints the site's
// tree as it converges until the root is Ready. Everything goes through the
// public REST API, as an operator's tooling would.
func runDemo(ctx context.Context, out io.Writer, base string, cfg Config, log *slog.Logger) error {
	bin, err := providerBinary()
	if err != nil {
		return err
	}
	c := &demoClient{base: base + "/api/v1", http: &http.Client{Timeout: 30 * time.Second}, token: firstOf(cfg.AdminTokens)}
	addr, err := freeLoopback()
	if err != nil {
		return err
	}
	providerURL := "http://" + addr + "/"
	secret, err := c.registerEndpoint(ctx, providerURL)
	if err != nil {
		return fmt.Errorf("register the provider endpoint: %w", err)
	}
	fmt.Fprintf(out, "registered endpoint %q -> %s\n", demoEndpoint, providerURL)

	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "PROVIDER_ADDR="+addr, "PROVIDER_SECRETS="+secret, "WORK_DELAY=400ms")
	cmd.Stdout, cmd.Stderr = prefixWriter(out, "[provider] "), prefixWriter(out, "[provider] ")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			log.Error("the quickstart provider exited", "err", err)
		}
	}()
	fmt.Fprintf(out, "started the quickstart provider (pid %d) on %s\n", cmd.Process.Pid, addr)

	for _, f := range quickstart.Manifests {
		var m struct {
			Kind string `json:"kind"`
		}
		body, err := quickstart.Files.ReadFile(f)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(body, &m); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		res, err := c.send(ctx, http.MethodPut, "/kinds/"+url.PathEscape(m.Kind)+"/manifest", body, nil)
		if err != nil {
			return fmt.Errorf("apply %s: %w", f, err)
		}
		fmt.Fprintf(out, "manifest/%s %s\n", m.Kind, res)
	}
	var root struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
		Name string `json:"name"`
	}
	for _, f := range quickstart.Resources {
		body, err := quickstart.Files.ReadFile(f)
		if err != nil {
			return err
		}
		res, err := c.send(ctx, http.MethodPost, "/resources", body, &root)
		if err != nil {
			return fmt.Errorf("apply %s: %w", f, err)
		}
		fmt.Fprintf(out, "resource/%s/%s %s\n", root.Kind, root.Name, res)
	}
	return c.watch(ctx, out, root.Kind, root.Name, root.ID)
}

// watch prints the root and its children whenever a phase changes, until
// the root is Ready with every child Ready.
func (c *demoClient) watch(ctx context.Context, out io.Writer, kind, name, id string) error {
	start := time.Now()
	deadline := time.After(3 * time.Minute)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		var rootRes struct {
			Phase  string          `json:"phase"`
			Status json.RawMessage `json:"status"`
		}
		if _, err := c.send(ctx, http.MethodGet, "/resources/"+url.PathEscape(kind)+"/"+url.PathEscape(name), nil, &rootRes); err != nil {
			return err
		}
		var kids struct {
			Items []struct {
				Kind  string `json:"kind"`
				Name  string `json:"name"`
				Phase string `json:"phase"`
			} `json:"items"`
		}
		if _, err := c.send(ctx, http.MethodGet, "/resources?owner="+url.QueryEscape(id)+"&limit=1000", nil, &kids); err != nil {
			return err
		}
		lines := []string{fmt.Sprintf("%-32s %s", kind+"/"+name, rootRes.Phase)}
		ready := 0
		for _, k := range kids.Items {
			lines = append(lines, fmt.Sprintf("  %-30s %s", k.Kind+"/"+k.Name, k.Phase))
			if k.Phase == "Ready" {
				ready++
			}
		}
		sort.Strings(lines[1:])
		if view := strings.Join(lines, "\n"); view != last {
			fmt.Fprintf(out, "\n[%5.1fs]\n%s\n", time.Since(start).Seconds(), view)
			last = view
		}
		if rootRes.Phase == "Ready" && ready == len(kids.Items) && len(kids.Items) > 0 {
			fmt.Fprintf(out, "\n%s/%s converged in %.1fs: status %s\n", kind, name, time.Since(start).Seconds(), rootRes.Status)
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline:
			return fmt.Errorf("%s/%s did not converge within 3 minutes (last seen %s)", kind, name, rootRes.Phase)
		case <-tick.C:
		}
	}
}

type demoClient struct {
	base  string
	http  *http.Client
	token string
}

// registerEndpoint creates the demo endpoint, or rotates its secret if it
// exists from an earlier dev session (a secret is only ever shown once).
func (c *demoClient) registerEndpoint(ctx context.Context, target string) (string, error) {
	ep := map[string]any{
		"name": demoEndpoint,
		"kinds": []map[string]any{
			{"kind": "bucket", "kind_version": 1}, {"kind": "cdn", "kind_version": 1}, {"kind": "site", "kind_version": 1}},
		"target":          map[string]any{"type": "https", "url": target},
		"health":          map[string]any{"url": target, "interval_secs": 2, "healthy_threshold": 1},
		"max_concurrency": 16, "request_timeout_secs": 30,
	}
	body, _ := json.Marshal(ep)
	var created struct {
		Secret string `json:"secret"`
	}
	if _, err := c.send(ctx, http.MethodPost, "/endpoints", body, &created); err != nil {
		return "", err
	}
	if created.Secret != "" {
		return created.Secret, nil
	}
	var rotated struct {
		Secret string `json:"secret"`
	}
	if _, err := c.send(ctx, http.MethodPost, "/endpoints/"+demoEndpoint+"/rotate-secret", nil, &rotated); err != nil {
		return "", err
	}
	if rotated.Secret == "" {
		return "", errors.New("the server returned no secret")
	}
	return rotated.Secret, nil
}

// send performs one API call and returns the X-Apply-Result header.
func (c *demoClient) send(ctx context.Context, method, path string, body []byte, into any) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode >= 300 {
		return "", fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if into != nil && len(data) > 0 {
		if err := json.Unmarshal(data, into); err != nil {
			return "", fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return resp.Header.Get("X-Apply-Result"), nil
}

// providerBinary finds quickstart-provider next to this executable (make
// build puts both in bin/).
func providerBinary() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(self), "quickstart-provider")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the demo needs %s: run `make build` (or `make demo`) first", p)
	}
	return p, nil
}

func freeLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// prefixWriter prefixes each line written to w.
func prefixWriter(w io.Writer, prefix string) io.Writer {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(w, prefix+sc.Text())
		}
	}()
	return pw
}
