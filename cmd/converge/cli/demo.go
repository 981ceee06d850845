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
)

// demoEndpoint is the name the demo registers its provider under.
const demoEndpoint = "quickstart"

// demoProvider is the example provider's binary, built by `make build` into
// bin/ next to converge. The converge binary links no example code: the
// provider is its own process, and the kinds and resources the demo applies
// are the ones its `objects` command prints.
const demoProvider = "quickstart-provider"

// runDemo starts the quickstart provider as its own process, registers its
// endpoint, applies the kinds it serves and its sample site, and prints the
// site's tree as it converges until the root is Ready. Everything goes
// through the public REST API, as an operator's tooling would.
func runDemo(ctx context.Context, out io.Writer, base string, cfg Config, log *slog.Logger) error {
	bin, err := providerBinary()
	if err != nil {
		return err
	}
	objs, err := providerObjects(ctx, bin)
	if err != nil {
		return err
	}
	c := &demoClient{base: base + "/api/v1", http: &http.Client{Timeout: 30 * time.Second}, token: firstOf(cfg.AdminTokens)}
	addr, err := freeLoopback()
	if err != nil {
		return err
	}
	providerURL := "http://" + addr + "/"
	secret, err := c.registerEndpoint(ctx, providerURL, objs.kinds)
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

	for i, body := range objs.Manifests {
		k := objs.kinds[i]
		res, err := c.send(ctx, http.MethodPut, "/kinds/"+url.PathEscape(k.Kind)+"/manifest", body, nil)
		if err != nil {
			return fmt.Errorf("apply manifest %s/v%d: %w", k.Kind, k.KindVersion, err)
		}
		fmt.Fprintf(out, "manifest/%s/v%d %s\n", k.Kind, k.KindVersion, res)
	}
	var root struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
		Name string `json:"name"`
	}
	for i, body := range objs.Resources {
		res, err := c.send(ctx, http.MethodPost, "/resources", body, &root)
		if err != nil {
			return fmt.Errorf("apply resource %d of %s: %w", i+1, bin, err)
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

// registerEndpoint creates the demo endpoint for kinds, or rotates its
// secret if it exists from an earlier dev session (a secret is only ever
// shown once).
func (c *demoClient) registerEndpoint(ctx context.Context, target string, kinds []demoKind) (string, error) {
	ep := map[string]any{
		"name":            demoEndpoint,
		"kinds":           kinds,
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
// build puts both in bin/), else on PATH.
func providerBinary() (string, error) {
	var next string
	if self, err := os.Executable(); err == nil {
		next = filepath.Join(filepath.Dir(self), demoProvider)
		if fi, err := os.Stat(next); err == nil && !fi.IsDir() {
			return next, nil
		}
	}
	if p, err := exec.LookPath(demoProvider); err == nil {
		return p, nil
	}
	where := "on PATH"
	if next != "" {
		where = "at " + next + " or on PATH"
	}
	return "", fmt.Errorf("the demo runs the example provider %s as its own process, and there is none %s: "+
		"run `make build` (it builds bin/converge and bin/%s), or `make demo`", demoProvider, where, demoProvider)
}

// demoObjects are what the provider's `objects` command prints.
type demoObjects struct {
	Manifests []json.RawMessage `json:"manifests"`
	Resources []json.RawMessage `json:"resources"`
	kinds     []demoKind        // of each manifest
}

type demoKind struct {
	Kind        string `json:"kind"`
	KindVersion int    `json:"kind_version"`
}

// providerObjects asks the provider binary for the manifests of the kinds
// it serves and its sample resources.
func providerObjects(ctx context.Context, bin string) (demoObjects, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "objects")
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return demoObjects{}, fmt.Errorf("%s objects: %w: %s (is it out of date? run `make build`)", bin, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var o demoObjects
	if err := json.Unmarshal(stdout, &o); err != nil {
		return demoObjects{}, fmt.Errorf("%s objects: %w", bin, err)
	}
	if len(o.Manifests) == 0 || len(o.Resources) == 0 {
		return demoObjects{}, fmt.Errorf("%s objects: want manifests and resources, got %d and %d", bin, len(o.Manifests), len(o.Resources))
	}
	for i, m := range o.Manifests {
		var k demoKind
		if err := json.Unmarshal(m, &k); err != nil || k.Kind == "" || k.KindVersion == 0 {
			return demoObjects{}, fmt.Errorf("%s objects: manifest %d names no kind and kind_version (%v)", bin, i+1, err)
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
