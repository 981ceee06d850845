// Package demo runs a demo on a converge server, as `converge dev --demo`
// does: it starts an example provider as its own process (and the
// S3-compatible store the classic demo's reactor writes to), registers it
// as an endpoint, applies the objects the provider prints, shows the root
// converge live, and says what to try next. Everything goes through the
// public REST API.
package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
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
	name   string // the --demo value and the endpoint's name
	binary string // the provider's executable
	// objects is the executable whose objects command prints what the
	// steps apply, "" when it is binary.
	objects string
	// needs are other executables the provider runs, looked up on PATH
	// before anything starts.
	needs []string
	// steps each apply what the objects command prints and watch the
	// root converge, the next one onto the last one's resources.
	steps []step
	env   []string // extra environment of the provider process
	s3    s3Store  // the S3-compatible store it needs
	hints []hint   // what to try next, once the root is Ready
	// again is the make command that runs this demo, left out of the
	// hints.
	again string
	// unready is a kind the provider starts reporting not ready (its
	// UNREADY_KINDS); "" for none. Its resources park while the rest
	// converges, and readyAfter later the demo makes it ready through the
	// provider's readiness switch (ADMIN_ADDR).
	unready    string
	readyAfter time.Duration
}

// s3Store is which S3-compatible store a demo needs.
type s3Store int

const (
	noS3       s3Store = iota
	anyS3              // this machine's moto_server, else the in-process stand-in
	embeddedS3         // the in-process stand-in (s3stub), always
)

// A step is the arguments of the provider's objects command and, after
// the first step, what it changes. In args and in a Demo's env, {dir}
// stands for the demo's own directory in the data dir, which it may write,
// {s3} for the S3 store's endpoint and {bucket} for its bucket.
type step struct {
	args  []string
	title string
}

// expand replaces the placeholders in each of list (see step).
func expand(list []string, r *strings.Replacer) []string {
	out := make([]string, len(list))
	for i, a := range list {
		out[i] = r.Replace(a)
	}
	return out
}

// A hint is a command to try next and what it shows. In cmd, {conctl}
// stands for the conctl command (see Conctl), {root} for the root's
// kind/name, {vpc} for a vpc of the tree and {admin} for the URL of the
// provider's readiness switch. A make hint is shown only in a
// directory with the Makefile, where it works.
type hint struct {
	cmd, why string
	make     bool
}

// BOMs are the classic demo's bills of materials; "updated" converges the
// small one, then applies the updated one onto it.
var BOMs = []string{"small", "large", "updated"}

// Settings are a demo's knobs.
type Settings struct {
	// BOM is the classic demo's bill of materials, one of BOMs.
	BOM string
	// FaultRate is the classic demo providers' transient failure rate,
	// at least 0 and below 1.
	FaultRate float64
	// ReadyAfter is how long the unhealthy demo's kind stays unready once
	// its resources parked.
	ReadyAfter time.Duration
}

// Names are the demos For knows.
var Names = []string{"classic", "quickstart", "unhealthy", "datadriven"}

// For picks the demo named name, one of Names, with the settings s:
// "classic" (s.BOM and s.FaultRate), "quickstart", "unhealthy" (the
// quickstart with its cdn kind unready for s.ReadyAfter), or "datadriven"
// (std kinds composing a tree, served by stdprovider, then an updated spec).
func For(name string, s Settings) (Demo, error) {
	bom, faultRate := s.BOM, s.FaultRate
	switch name {
	case "datadriven":
		return Demo{name: name, binary: "stdprovider", objects: "datadriven-demo", needs: []string{"terraform"},
			steps: []step{{args: []string{"objects", "--dir", "{dir}", "--s3", "{s3}", "--bucket", "{bucket}"}},
				{args: []string{"objects", "--dir", "{dir}", "--s3", "{s3}", "--bucket", "{bucket}", "--updated"},
					title: "the updated spec: a service and the cache out, a service and the dns leaf in"}},
			s3: embeddedS3, again: "make demo-datadriven",
			// Terraform's S3 backend reaches S3 and STS at the stand-in, signing
			// with demo credentials; nothing of a person's AWS profile applies.
			env: []string{"STD_KINDS=stdcel,stdstarlark,stdterraform,stdshell", "AWS_ENDPOINT_URL={s3}", "AWS_REGION=us-east-1",
				"AWS_ACCESS_KEY_ID=demo", "AWS_SECRET_ACCESS_KEY=demo", "AWS_SESSION_TOKEN=", "AWS_PROFILE=", "AWS_EC2_METADATA_DISABLED=true"},
			hints: []hint{
				{cmd: "{conctl} watch resource {root} --follow", why: "the live view on its own (Ctrl+C ends it)"},
				{cmd: "{conctl} get resource stdterraform/shop-network -o yaml", why: "the module's outputs in its status"},
				{cmd: "{conctl} get resource stdshell/shop-api -o yaml", why: "the script's output: the network id, flowed from Terraform through Starlark"},
				{cmd: "{conctl} list resources --kind stdshell", why: "the leaves the Starlark program and the CEL graph composed"},
				{cmd: "{conctl} delete resource {root}", why: "the cascade: terraform destroy runs before the network goes"},
				{cmd: "make demo-unhealthy", why: "a new demo: a kind reporting not ready parks its resources", make: true},
			}}, nil
	case "unhealthy":
		if s.ReadyAfter < 0 {
			return Demo{}, fmt.Errorf("ready after %s: want 0 or more", s.ReadyAfter)
		}
		return Demo{name: name, binary: "quickstart-provider", steps: []step{{args: []string{"objects"}}}, env: []string{"WORK_DELAY=400ms"},
			unready: "cdn", readyAfter: s.ReadyAfter, again: "make demo-unhealthy",
			hints: []hint{
				{cmd: "curl -X POST {admin}/unready/cdn", why: "cdn's health answer says not ready again (from the next probe, 2s)"},
				{cmd: "{conctl} reconcile cdn/shop-cdn", why: "its task parks instead of failing"},
				{cmd: "{conctl} get resource cdn/shop-cdn -o yaml", why: "parked: why the task waits"},
				{cmd: "curl -X POST {admin}/ready/cdn", why: "ready again: the parked task runs"},
				{cmd: "{conctl} watch resource {root} --follow", why: "the live view on its own (Ctrl+C ends it)"},
				{cmd: "make demo-quickstart", why: "a new demo: the same site with every kind ready", make: true},
			}}, nil
	case "quickstart":
		return Demo{name: name, binary: "quickstart-provider", steps: []step{{args: []string{"objects"}}}, env: []string{"WORK_DELAY=400ms"},
			hints: []hint{
				{cmd: "{conctl} get resource {root}", why: "its phase and generation; -o yaml for status and conditions"},
				{cmd: "{conctl} list resources", why: "the site and the children it composed"},
				{cmd: "{conctl} delete resource {root}", why: "the children first, then the site"},
			}}, nil
	case "classic":
		if !slices.Contains(BOMs, bom) {
			return Demo{}, fmt.Errorf("unknown BOM %q: want one of %s", bom, strings.Join(BOMs, ", "))
		}
		if faultRate < 0 || faultRate >= 1 {
			return Demo{}, fmt.Errorf("fault rate %g: want at least 0 and below 1", faultRate)
		}
		steps := []step{{args: []string{"objects", "--bom", bom}}}
		if bom == "updated" {
			steps = []step{{args: []string{"objects", "--bom", "small"}},
				{args: []string{"objects", "--bom", "updated"}, title: "the updated BOM, applied onto the small one"}}
		}
		again := "make demo BOM=" + bom
		if faultRate > 0 {
			again += " FAULT_RATE=" + strconv.FormatFloat(faultRate, 'f', -1, 64)
		}
		return Demo{name: name, binary: "classic-provider", steps: steps, s3: anyS3, again: again,
			// The local store takes any credentials, but the S3 client signs
			// every request: without these it would look for an instance role.
			env: []string{"FAKE_FAULT_RATE=" + strconv.FormatFloat(faultRate, 'f', -1, 64),
				"AWS_ACCESS_KEY_ID=demo", "AWS_SECRET_ACCESS_KEY=demo", "AWS_EC2_METADATA_DISABLED=true"},
			hints: []hint{
				{cmd: "{conctl} watch resource {root} --follow", why: "the live view on its own (Ctrl+C ends it)"},
				{cmd: "{conctl} op {vpc} enable_flow_logs --wait", why: "a verb"},
				{cmd: "{conctl} delete resource {root}", why: "the cascade, in reverse dependency order"},
				{cmd: "make demo BOM=updated", why: "a new demo: the small BOM, then one team removed and one added", make: true},
				{cmd: "make demo BOM=large FAULT_RATE=0.25", why: "a new demo: ~5,400 resources, a quarter of the calls failing", make: true},
			}}, nil
	}
	return Demo{}, fmt.Errorf("unknown demo %q: want one of %s", name, strings.Join(Names, ", "))
}

// Env is where a demo runs.
type Env struct {
	// Out is the terminal: what the demo does, the live view and what to
	// try next. The server's logs must go elsewhere: a line written
	// between two frames of the view tears it.
	Out io.Writer
	// Base is the server's URL, http://host:port.
	Base string
	// Token is an admin token of its API, "" when the API is open.
	Token string
	// DataDir is where the provider and the S3 store log.
	DataDir string
	// BinDir is searched for the provider and conctl before PATH: where
	// `make build` put converge.
	BinDir string
	// Getenv reads PATH and COLUMNS.
	Getenv func(string) string
}

// Check fails, saying how to build it, if the demo's provider binary (or
// the one printing its objects) cannot be found, or how to get it, if a
// program the provider runs is not on PATH: before anything is started.
func (d Demo) Check(env Env) error {
	for _, b := range []string{d.binary, d.objects} {
		if b == "" {
			continue
		}
		if _, err := providerBinary(b, env); err != nil {
			return err
		}
	}
	for _, n := range d.needs {
		if _, err := lookPath(n, Env{Getenv: env.Getenv}); err != nil {
			return fmt.Errorf("the %s demo's provider runs %s, and there is none on PATH: install it first", d.name, n)
		}
	}
	return nil
}

// Run starts the demo's services and provider, registers its endpoint and
// runs its steps: each applies the kinds, provider configs, reactor
// bindings and resources the provider's objects command prints, and shows
// the last resource (the root) converge with the watch view until it is
// Ready. Then it prints what to try next. stop ends what it started; it is
// set even on error.
func Run(ctx context.Context, d Demo, env Env) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	bin, err := providerBinary(d.binary, env)
	if err != nil {
		return stop, err
	}
	objBin := bin
	if d.objects != "" {
		if objBin, err = providerBinary(d.objects, env); err != nil {
			return stop, err
		}
	}
	dir := filepath.Join(env.DataDir, d.name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return stop, fmt.Errorf("the demo's directory: %w", err)
	}
	c := &client{base: env.Base + "/api/v1", http: &http.Client{Timeout: 30 * time.Second}, token: env.Token}
	s3 := ""
	if d.s3 != noS3 {
		endpoint, stopS3, err := startS3(ctx, env.DataDir, d.s3 == embeddedS3)
		if err != nil {
			return stop, fmt.Errorf("S3 store: %w", err)
		}
		stops = append(stops, stopS3)
		s3 = endpoint
		fmt.Fprintf(env.Out, "S3 store on %s, bucket %s\n", s3, demoBucket)
	}
	placeholders := strings.NewReplacer("{dir}", dir, "{s3}", s3, "{bucket}", demoBucket)
	d.env = expand(d.env, placeholders)
	objs, err := providerObjects(ctx, objBin, expand(d.steps[0].args, placeholders))
	if err != nil {
		return stop, err
	}
	admin := ""
	if d.unready != "" {
		addr, err := freeLoopback()
		if err != nil {
			return stop, err
		}
		admin = "http://" + addr
		d.env = append(d.env, "UNREADY_KINDS="+d.unready, "ADMIN_ADDR="+addr)
	}
	stopProvider, err := startProvider(ctx, c, d, bin, objs.kinds, env)
	if stopProvider != nil {
		stops = append(stops, stopProvider)
	}
	if err != nil {
		return stop, err
	}

	var last watchview.Snapshot
	for i, st := range d.steps {
		if i > 0 {
			args := expand(st.args, placeholders)
			if objs, err = providerObjects(ctx, objBin, args); err != nil {
				return stop, err
			}
			fmt.Fprintf(env.Out, "\nnext, %s (%s %s)\n", st.title, filepath.Base(objBin), strings.Join(args, " "))
		}
		root, err := c.applyObjects(ctx, env.Out, objs, s3)
		if err != nil {
			return stop, err
		}
		src := watchview.Source{Kind: root.Kind, Name: root.Name, Now: time.Now,
			Get: func(ctx context.Context, path string) ([]byte, error) { return c.get(ctx, path) }}
		opts := watchview.Options{Out: env.Out, TTY: watchview.IsTerminal(env.Out),
			Width: columns(env.Getenv), Interval: time.Second, Laggards: 5, Attempt: src.Attempt,
			Until: func(_ context.Context, s watchview.Snapshot) bool { return converged(s) }}
		start := time.Now()
		if d.unready != "" && i == 0 {
			err = d.parkThenReady(ctx, env.Out, src, opts, admin)
		}
		if err == nil {
			_, err = watchview.Watch(ctx, src.Snapshot, opts)
		}
		if err != nil {
			if ctx.Err() != nil {
				return stop, nil // Ctrl+C during the view
			}
			return stop, err
		}
		took := time.Since(start)
		s, err := src.Snapshot(ctx)
		if err != nil {
			return stop, err
		}
		fmt.Fprintf(env.Out, "\n%s converged in %.1fs: it and its %d children are Ready\n", s.Root.Ref(), took.Seconds(), len(s.Children))
		if i > 0 {
			removed, added := changed(last, s)
			fmt.Fprintf(env.Out, "  removed: %s\n  added:   %s\n", refList(removed), refList(added))
		}
		last = s
	}
	_, err = os.Stat("Makefile")
	fmt.Fprintln(env.Out, "\ntry next:")
	for _, l := range d.nextSteps(Conctl(env), admin, last, err == nil) {
		fmt.Fprintln(env.Out, "  "+l)
	}
	return stop, nil
}

// nextSteps are the demo's hints for the tree s, commands aligned and
// commented, admin the URL of the provider's readiness switch; make hints
// only with haveMake, the Makefile in the working directory.
func (d Demo) nextSteps(conctl, admin string, s watchview.Snapshot, haveMake bool) []string {
	vpc := ""
	for _, n := range s.Children {
		if n.Kind == "vpc" && (vpc == "" || n.Ref() < vpc) {
			vpc = n.Ref()
		}
	}
	var cmds, whys []string
	width := 0
	for _, h := range d.hints {
		if (h.make && (!haveMake || h.cmd == d.again)) || (strings.Contains(h.cmd, "{vpc}") && vpc == "") {
			continue
		}
		cmd := strings.NewReplacer("{conctl}", conctl, "{root}", s.Root.Ref(), "{vpc}", vpc, "{admin}", admin).Replace(h.cmd)
		cmds, whys = append(cmds, cmd), append(whys, h.why)
		width = max(width, len(cmd))
	}
	out := make([]string, len(cmds))
	for i, cmd := range cmds {
		out[i] = fmt.Sprintf("%-*s  # %s", width, cmd, whys[i])
	}
	return out
}

// changed lists the resources of the tree b that a does not hold, and
// those of a that b does not.
func changed(a, b watchview.Snapshot) (removed, added []string) {
	refs := func(s watchview.Snapshot) map[string]bool {
		m := map[string]bool{}
		for _, n := range s.Children {
			m[n.Ref()] = true
		}
		return m
	}
	ra, rb := refs(a), refs(b)
	for r := range ra {
		if !rb[r] {
			removed = append(removed, r)
		}
	}
	for r := range rb {
		if !ra[r] {
			added = append(added, r)
		}
	}
	slices.Sort(removed)
	slices.Sort(added)
	return removed, added
}

func refList(refs []string) string {
	if len(refs) == 0 {
		return "none"
	}
	return strings.Join(refs, ", ")
}

// Conctl is how a person at env's terminal runs conctl against env's
// server: the conctl next to converge (bin/conctl from the checkout make
// built it in), else the one on PATH, with --server unless the server is at
// conctl's default address.
func Conctl(env Env) string {
	cmd := "conctl"
	if p, err := lookPath("conctl", env); err == nil && filepath.Dir(p) == filepath.Clean(env.BinDir) {
		cmd = p
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(rel, "..") {
				cmd = rel
				if !strings.Contains(rel, string(filepath.Separator)) {
					cmd = "." + string(filepath.Separator) + rel
				}
			}
		}
	}
	if env.Base != "http://127.0.0.1:8080" && env.Base != "http://localhost:8080" {
		cmd += " --server " + env.Base
	}
	return cmd
}

// columns is the terminal's width: $COLUMNS, else 80.
func columns(getenv func(string) string) int {
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 20 {
		return n
	}
	return 80
}

// converged reports whether the root and every child are Ready. The root alone
// is Ready as soon as the children it keeps are: a child an update pruned is
// still Deleting (a terraform destroy, say) and would be counted as still there.
func converged(s watchview.Snapshot) bool {
	if s.Root.Phase != "Ready" {
		return false
	}
	for _, c := range s.Children {
		if c.Phase != "Ready" {
			return false
		}
	}
	return true
}
