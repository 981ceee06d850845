// Package demo runs a demo on a converge server, as `converge dev --demo`
// does: it starts an example provider as its own process (and the
// S3-compatible store the classic demo's reactor writes to), registers it
// as an endpoint, applies the objects the provider prints, and shows the
// root converge live. Everything goes through the public REST API.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/convergeplane/converge/internal/watchview"
)

// A Demo is an example provider binary, built by `make build` into bin/ next
// to converge, plus the objects its `objects` command prints and the
// services it needs. The converge binary links no example code: the
// provider is its own process.
type Demo struct {
	name    string   // the --demo value and the endpoint's name
	binary  string   // the provider's executable
	objects []string // the arguments of its objects command
	env     []string // extra environment of the provider process
	s3      bool     // it needs an S3-compatible store (statussink)
	next    []string // what to try once the root is Ready
}

// BOMs are the classic demo's bills of materials.
var BOMs = []string{"small", "large", "updated"}

// For picks the demo named name: "classic" (bom selects its BOM,
// faultRate its providers' transient failure rate) or "quickstart".
func For(name, bom string, faultRate float64) (Demo, error) {
	switch name {
	case "quickstart":
		return Demo{name: name, binary: "quickstart-provider", objects: []string{"objects"}, env: []string{"WORK_DELAY=400ms"},
			next: []string{"conctl get resource site/sample-site", "conctl delete resource site/sample-site"}}, nil
	case "classic":
		if !slices.Contains(BOMs, bom) {
			return Demo{}, fmt.Errorf("unknown BOM %q: want one of %s", bom, strings.Join(BOMs, ", "))
		}
		if faultRate < 0 || faultRate >= 1 {
			return Demo{}, fmt.Errorf("fault rate %g: want at least 0 and below 1", faultRate)
		}
		return Demo{name: name, binary: "classic-provider", objects: []string{"objects", "--bom", bom}, s3: true,
			// The local store takes any credentials, but the S3 client signs
			// every request: without these it would look for an instance role.
			env: []string{"FAKE_FAULT_RATE=" + strconv.FormatFloat(faultRate, 'f', -1, 64),
				"AWS_ACCESS_KEY_ID=demo", "AWS_SECRET_ACCESS_KEY=demo", "AWS_EC2_METADATA_DISABLED=true"},
			next: []string{
				"conctl watch resource classicbom/<name> --follow   # the live view on its own",
				"conctl op vpc/<name> enable_flow_logs --wait       # a verb",
				"make demo BOM=updated                              # one team removed, one added",
				"make demo BOM=large FAULT_RATE=0.25                # ~5,400 resources, with chaos",
				"conctl delete resource classicbom/<name>           # the cascade, in reverse dependency order",
			}}, nil
	}
	return Demo{}, fmt.Errorf("unknown demo %q: want classic or quickstart", name)
}

// Run starts the demo's services and provider, registers its endpoint,
// applies its kinds, configs, bindings and resources, and shows the last
// resource (the root) converge with the watch view until it is Ready.
// Everything goes through the public REST API, as an operator's tooling
// would. stop ends what it started; it is set even on error.
// base is the server's URL, token an admin token ("" for an open API) and
// dataDir where the provider and the store log.
func Run(ctx context.Context, out io.Writer, base, token, dataDir string, d Demo) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	bin, err := providerBinary(d.binary)
	if err != nil {
		return stop, err
	}
	objs, err := providerObjects(ctx, bin, d.objects)
	if err != nil {
		return stop, err
	}
	c := &demoClient{base: base + "/api/v1", http: &http.Client{Timeout: 30 * time.Second}, token: token}
	s3 := ""
	if d.s3 {
		endpoint, stopS3, err := startS3(ctx, dataDir)
		if err != nil {
			return stop, fmt.Errorf("S3 store: %w", err)
		}
		stops = append(stops, stopS3)
		s3 = endpoint
		fmt.Fprintf(out, "S3 store on %s, bucket %s\n", s3, demoBucket)
	}
	addr, err := freeLoopback()
	if err != nil {
		return stop, err
	}
	providerURL := "http://" + addr + "/"
	secret, err := c.registerEndpoint(ctx, d.name, providerURL, objs.kinds)
	if err != nil {
		return stop, fmt.Errorf("register the provider endpoint: %w", err)
	}
	fmt.Fprintf(out, "registered endpoint %q -> %s\n", d.name, providerURL)

	// The provider logs to a file: on a terminal its lines would tear the
	// view drawn in place.
	logPath := filepath.Join(dataDir, d.binary+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return stop, fmt.Errorf("provider log: %w", err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "PROVIDER_ADDR="+addr, "PROVIDER_SECRETS="+secret), d.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return stop, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }() //nolint:errcheck // its log says why
	stops = append(stops, func() {
		cmd.Process.Signal(os.Interrupt) //nolint:errcheck // it may have exited already
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill() //nolint:errcheck // as above
			<-exited
		}
	})
	fmt.Fprintf(out, "started %s (pid %d) on %s, logging to %s\n", d.binary, cmd.Process.Pid, addr, logPath)

	root, err := c.applyObjects(ctx, out, objs, s3)
	if err != nil {
		return stop, err
	}
	width := 80
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 20 {
		width = n
	}
	fetch := func(ctx context.Context) (watchview.Snapshot, error) {
		var body json.RawMessage
		path := "/resources/" + url.PathEscape(root.Kind) + "/" + url.PathEscape(root.Name) + "/graph"
		if _, err := c.send(ctx, http.MethodGet, path, nil, &body); err != nil {
			return watchview.Snapshot{}, err
		}
		return watchview.DecodeGraph(body, root.Kind, root.Name, time.Now())
	}
	start := time.Now()
	v, err := watchview.Watch(ctx, fetch, watchview.Options{Out: out, TTY: watchview.IsTerminal(out), Width: width,
		Interval: time.Second, Laggards: 5})
	if err != nil {
		if ctx.Err() != nil {
			return stop, nil // Ctrl+C during the view
		}
		return stop, err
	}
	fmt.Fprintf(out, "\n%s converged in %.1fs: %d resources Ready\n\ntry next:\n", root.Kind+"/"+root.Name, time.Since(start).Seconds(), v.Ready)
	for _, s := range d.next {
		fmt.Fprintln(out, "  "+strings.ReplaceAll(s, "<name>", root.Name))
	}
	return stop, nil
}

// applyObjects applies a demo's objects in dependency order: kinds, provider
// configs (statussink's pointed at the S3 endpoint s3), reactor bindings,
// resources. It returns the last resource, the root to watch.
func (c *demoClient) applyObjects(ctx context.Context, out io.Writer, objs demoObjects, s3 string) (demoRef, error) {
	for i, body := range objs.Manifests {
		k := objs.kinds[i]
		res, err := c.send(ctx, http.MethodPut, "/kinds/"+url.PathEscape(k.Kind)+"/manifest", body, nil)
		if err != nil {
			return demoRef{}, fmt.Errorf("apply manifest %s/v%d: %w", k.Kind, k.KindVersion, err)
		}
		fmt.Fprintf(out, "manifest/%s/v%d %s\n", k.Kind, k.KindVersion, res)
	}
	for _, body := range objs.ProviderConfigs {
		body, err := withS3(body, s3)
		if err != nil {
			return demoRef{}, err
		}
		var pc demoRef
		res, err := c.send(ctx, http.MethodPost, "/providerconfigs", body, &pc)
		if err != nil {
			return demoRef{}, fmt.Errorf("apply a provider config: %w", err)
		}
		fmt.Fprintf(out, "providerconfig/%s %s\n", pc.Name, res)
	}
	for _, body := range objs.Bindings {
		var rb demoRef
		res, err := c.send(ctx, http.MethodPost, "/reactor-bindings", body, &rb)
		if err != nil {
			return demoRef{}, fmt.Errorf("apply a reactor binding: %w", err)
		}
		fmt.Fprintf(out, "reactor-binding/%s %s\n", rb.Name, res)
	}
	var root demoRef
	for i, body := range objs.Resources {
		res, err := c.send(ctx, http.MethodPost, "/resources", body, &root)
		if err != nil {
			return demoRef{}, fmt.Errorf("apply resource %d: %w", i+1, err)
		}
		fmt.Fprintf(out, "resource/%s/%s %s\n", root.Kind, root.Name, res)
	}
	return root, nil
}

// withS3 points a statussink provider config at the demo's S3 store; any
// other config is returned as is.
func withS3(body json.RawMessage, s3 string) (json.RawMessage, error) {
	var pc map[string]any
	if err := json.Unmarshal(body, &pc); err != nil {
		return nil, fmt.Errorf("a provider config: %w", err)
	}
	if pc["kind"] != "statussink" {
		return body, nil
	}
	if s3 == "" {
		return nil, errors.New("a statussink provider config, and no S3 store")
	}
	pc["spec"] = map[string]any{"endpoint": s3, "bucket": demoBucket, "prefix": "status", "region": "us-east-1"}
	return json.Marshal(pc)
}

// demoRef names what an apply answered.
type demoRef struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

type demoClient struct {
	base  string
	http  *http.Client
	token string
}

// registerEndpoint creates the demo endpoint for kinds, or rotates its
// secret if it exists from an earlier dev session (a secret is only ever
// shown once).
func (c *demoClient) registerEndpoint(ctx context.Context, name, target string, kinds []demoKind) (string, error) {
	ep := map[string]any{
		"name":            name,
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
	if _, err := c.send(ctx, http.MethodPost, "/endpoints/"+url.PathEscape(name)+"/rotate-secret", nil, &rotated); err != nil {
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
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20)) // a large BOM's graph is megabytes
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

// Check fails if the demo's provider binary cannot be found (see
// providerBinary), before anything is started.
func (d Demo) Check() error {
	_, err := providerBinary(d.binary)
	return err
}

// providerBinary finds the provider binary name next to this executable
// (make build puts both in bin/), else on PATH.
func providerBinary(name string) (string, error) {
	var next string
	if self, err := os.Executable(); err == nil {
		next = filepath.Join(filepath.Dir(self), name)
		if fi, err := os.Stat(next); err == nil && !fi.IsDir() {
			return next, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	where := "on PATH"
	if next != "" {
		where = "at " + next + " or on PATH"
	}
	return "", fmt.Errorf("the demo runs the example provider %s as its own process, and there is none %s: "+
		"run `make build` (it builds bin/converge and bin/%s), or `make demo`", name, where, name)
}

// demoObjects are what the provider's `objects` command prints.
type demoObjects struct {
	Manifests       []json.RawMessage `json:"manifests"`
	ProviderConfigs []json.RawMessage `json:"providerconfigs"`
	Bindings        []json.RawMessage `json:"bindings"`
	Resources       []json.RawMessage `json:"resources"`
	kinds           []demoKind        // of each manifest
}

type demoKind struct {
	Kind        string `json:"kind"`
	KindVersion int    `json:"kind_version"`
}

// providerObjects asks the provider binary for the manifests of the kinds
// it serves and its sample resources.
func providerObjects(ctx context.Context, bin string, args []string) (demoObjects, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
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
