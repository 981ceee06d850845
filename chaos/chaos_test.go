package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/chaos/internal/calllog"
	"github.com/convergeplane/converge/chaos/internal/proxy"
	"github.com/convergeplane/converge/internal/embeddedpg"
	"github.com/convergeplane/converge/internal/testkit/testnet"
)

// The suite's fixed settings. The dispatch lease (60 s) and the reaper's
// interval (5 s) are converge's defaults, which no variable changes.
const (
	reaperPass     = 5 * time.Second
	claimSlack     = 5 * time.Second  // sampling every second on a loaded machine
	rejoin         = 5 * time.Second  // a restarted control process taking its shards back
	taskDeadline   = 10               // seconds: kind_config task_deadline_secs
	requestTimeout = 2                // seconds: the endpoint's request_timeout_secs
	faultedFloor   = 90 * time.Second // see docs/operations.md, Chaos suite
	dispatchLease  = 60 * time.Second
	childrenPer    = 8
	// Pacing: every Work takes workTime and the endpoint takes at most
	// settings.concurrency deliveries at once, so the faults land while the
	// workload converges rather than after it.
	workTime = 250 * time.Millisecond
)

type settings struct {
	seed        uint64
	resources   int
	short       bool
	concurrency int
	breakFence  bool
}

func loadSettings(t *testing.T) settings {
	s := settings{resources: 3000, short: os.Getenv("CHAOS_SHORT") != "", breakFence: os.Getenv("CHAOS_BREAK_FENCE") != ""}
	s.concurrency = 8
	if s.short {
		s.resources, s.concurrency = 600, 6
	}
	if v := os.Getenv("CHAOS_RESOURCES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 20 {
			t.Fatalf("CHAOS_RESOURCES=%q: want a number ≥ 20", v)
		}
		s.resources = n
	}
	s.seed = uint64(time.Now().UnixNano() % 1_000_000)
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: want a number", v)
		}
		s.seed = n
	}
	return s
}

// TestChaos is the chaos suite: a clean run measures the time T to
// converge the workload, then a run with faults must converge it within
// max(2T, T+faultedFloor) and keep every invariant. Only with CHAOS=1.
// With CHAOS_BREAK_FENCE=1 the faulted run's database accepts outcomes
// without the claim_epoch fence, and the test passes only if the
// no-double-apply check reports it.
func TestChaos(t *testing.T) {
	if os.Getenv("CHAOS") == "" {
		t.Skip("the chaos suite runs with CHAOS=1 (make chaos, make chaos-short)")
	}
	s := loadSettings(t)
	fmt.Printf("chaos: seed %d (replay: CHAOS_SEED=%d), %d resources, short=%v, break-fence=%v\n", s.seed, s.seed, s.resources, s.short, s.breakFence)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed %d: "+format, append([]any{s.seed}, args...)...)
	}
	bin := t.TempDir()
	for _, b := range [][2]string{{"converge", "../cmd/converge"}, {"chaos-provider", "./provider"}} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, b[0]), b[1]).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b[1], err, out)
		}
	}
	ctx := t.Context()
	pg, err := embeddedpg.Start(ctx, embeddedpg.Config{Settings: map[string]string{"max_connections": "400"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })
	// The restart fault stops the postmaster the way pg_ctl stop -m
	// immediate does; Watch starts it again on the same port and data.
	pgDied := pg.Watch(ctx, embeddedpg.WatchConfig{Attempts: 20, Backoff: 500 * time.Millisecond})
	go func() {
		if err, ok := <-pgDied; ok && err != nil {
			fmt.Printf("chaos: seed %d: postgres could not be restarted: %v\n", s.seed, err)
		}
	}()

	clean := runWorkload(t, s, bin, pg, "clean", nil)
	if len(clean.violations) > 0 {
		fail("the clean run broke %d invariants:\n  %s", len(clean.violations), strings.Join(clean.violations, "\n  "))
		return
	}
	window := max(clean.took/2, 20*time.Second)
	plan := schedule(s, window)
	faulted := runWorkload(t, s, bin, pg, "faulted", plan)
	bound := max(2*clean.took, clean.took+faultedFloor)
	if faulted.took > bound {
		faulted.violations = append(faulted.violations, fmt.Sprintf("faulted run took %s, over its bound %s (clean %s)",
			faulted.took.Round(time.Second), bound.Round(time.Second), clean.took.Round(time.Second)))
	}
	fmt.Printf("chaos: summary (seed %d)\n", s.seed)
	fmt.Printf("  resources: %d converged clean, %d converged faulted, of %d\n", clean.converged, faulted.converged, s.resources)
	fmt.Printf("  time: clean %s, faulted %s (bound %s)\n", clean.took.Round(100*time.Millisecond), faulted.took.Round(100*time.Millisecond), bound.Round(time.Second))
	fmt.Printf("  process and network faults (%d): %s\n", len(plan), faulted.faultTally())
	fmt.Printf("  provider faults: %s\n", faulted.providerTally)
	fmt.Printf("  provider calls: %d deliveries, %d Work runs, %d callbacks; applied outcomes %d\n",
		faulted.deliveries, faulted.works, faulted.callbacks, faulted.applied)
	fmt.Printf("  claims: %d samples of the queue, %d sightings of a claim past its lease\n", faulted.sampled, faulted.samples)
	fmt.Printf("  restarted processes that exited at boot and were started again: %d\n", faulted.bootExits)
	fmt.Printf("  invariant violations: %d\n", len(faulted.violations))
	if s.breakFence {
		// The broken build must be caught by the no-double-apply check.
		caught := 0
		for _, v := range faulted.violations {
			if strings.HasPrefix(v, "stale outcome applied") || strings.HasPrefix(v, "double apply") {
				caught++
			}
		}
		fmt.Printf("chaos: with the claim_epoch fence removed, the no-double-apply check reported %d violations:\n  %s\n",
			caught, strings.Join(faulted.violations, "\n  "))
		if caught == 0 {
			fail("the claim_epoch fence was removed and the no-double-apply check did not notice")
		}
		return
	}
	if len(faulted.violations) > 0 {
		fail("%d invariant violations in the faulted run (logs in %s):\n  %s", len(faulted.violations), faulted.dir, strings.Join(faulted.violations, "\n  "))
	}
}

// fault is one scheduled process or network fault.
type fault struct {
	at     time.Duration // after the workload starts
	kind   string
	target int           // which process of its role
	down   time.Duration // how long it lasts
}

var faultKinds = []string{"kill-control", "kill-dispatch", "kill-provider", "restart-postgres", "cut-db", "cut-provider", "cut-callback"}

// schedule draws the faults from the seed: every kind once, in an order of
// the seed's choosing, and more for the long run, spread over window.
func schedule(s settings, window time.Duration) []fault {
	r := mrand.New(mrand.NewPCG(s.seed, 14))
	kinds := slices.Clone(faultKinds)
	r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	if !s.short {
		for range len(faultKinds) {
			kinds = append(kinds, faultKinds[r.IntN(len(faultKinds))])
		}
	}
	step := window / time.Duration(len(kinds)+1)
	out := make([]fault, len(kinds))
	longDispatch := false
	for i, k := range kinds {
		out[i] = fault{at: step*time.Duration(i+1) + time.Duration(r.Int64N(int64(step/2))), kind: k,
			target: r.IntN(4), down: time.Second + time.Duration(r.Int64N(int64(4*time.Second)))}
		// The first dispatch process killed stays dead past its lease, so
		// its claims are the reaper's to take back.
		if k == "kill-dispatch" && !longDispatch {
			out[i].down, longDispatch = dispatchLease+10*time.Second, true
		}
	}
	return out
}

// result is what one run measured and found.
type result struct {
	dir                                                     string
	took                                                    time.Duration
	converged                                               int
	violations                                              []string
	faults                                                  map[string]int
	providerTally                                           string
	deliveries, works, callbacks, applied, samples, sampled int
	bootExits                                               int // restarts that exited at boot and were started again
}

func (r *result) faultTally() string {
	var parts []string
	for _, k := range faultKinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.faults[k]))
	}
	return strings.Join(parts, ", ")
}

// proc is one process the suite runs and may kill and start again.
type proc struct {
	name   string
	bin    string
	args   []string
	env    []string
	ready  string // URL answering 200 once it serves
	logDir string

	// down is held by the fault that has the process down, so two faults
	// never kill and restart one process at once (which would start it twice).
	down sync.Mutex

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been waited for
	boots  int
	args0  func(boot int) []string
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited != nil {
		select {
		case <-p.exited:
		default:
			return fmt.Errorf("%s is already running", p.name)
		}
	}
	args := p.args
	if p.args0 != nil {
		args = p.args0(p.boots)
	}
	logf, err := os.OpenFile(filepath.Join(p.logDir, p.name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // killed or stopped on purpose
		_ = logf.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	p.boots++
	return nil
}

func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Kill() // SIGKILL
	<-p.exited
}

func (p *proc) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// errExited is waitReady's answer when the process exited before it served.
var errExited = errors.New("exited before it was ready")

func (p *proc) waitReady(within time.Duration) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("%s %w", p.name, errExited)
		default:
		}
		resp, err := http.Get(p.ready)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s", p.name, within)
}

func newKey(n int) string {
	k := make([]byte, n)
	_, _ = rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// runWorkload runs the workload once on a fresh database, with the faults
// of plan (none for the clean run), and checks every invariant.
func runWorkload(t *testing.T, s settings, bin string, pg *embeddedpg.Server, label string, plan []fault) *result {
	ctx := t.Context()
	res := &result{dir: filepath.Join(runDir(t), label), faults: map[string]int{}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("seed %d: %s run: %v (logs in %s)", s.seed, label, err, res.dir)
		}
	}
	must(os.MkdirAll(res.dir, 0o700))
	admin, err := pgxpool.New(ctx, pg.DSN("postgres"))
	must(err)
	dbName := "chaos_" + label
	_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+dbName)
	must(err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+dbName)
	must(err)
	admin.Close()
	direct := pg.DSN(dbName)
	mig := exec.Command(filepath.Join(bin, "converge"), "migrate", "up")
	mig.Env = append(os.Environ(), "DATABASE_URL="+direct)
	if out, err := mig.CombinedOutput(); err != nil {
		must(fmt.Errorf("migrate: %v\n%s", err, out))
	}
	db, err := pgxpool.New(ctx, direct)
	must(err)
	defer db.Close()
	must(installApplyLog(ctx, db))
	if s.breakFence && plan != nil {
		must(breakFence(ctx, db))
	}

	// Processes: two control, two dispatch, one provider, each converge
	// process's database path and every path to the provider and to the
	// callbacks through a proxy of the suite's.
	secretKey, callbackKey := newKey(32), newKey(32)
	var proxies []*proxy.Proxy
	newProxy := func(upstream string) *proxy.Proxy {
		p, err := proxy.Start(upstream)
		must(err)
		proxies = append(proxies, p)
		return p
	}
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	pgAddr, _, _ := strings.Cut(strings.SplitN(direct, "@", 2)[1], "/")
	providerAddr := testnet.FreeAddr(t)
	providerProxy := newProxy(providerAddr)
	faultsUntil := int64(0)
	var controls, dispatchers []*proc
	dbProxies := map[*proc]*proxy.Proxy{}
	callbackProxies := map[*proc]*proxy.Proxy{}
	for i, role := range []string{"control", "control", "dispatch", "dispatch"} {
		listen, health := testnet.FreeAddr(t), testnet.FreeAddr(t)
		dbp := newProxy(pgAddr)
		p := &proc{name: fmt.Sprintf("%s-%d", role, i%2), bin: filepath.Join(bin, "converge"), args: []string{"dev"}, logDir: res.dir,
			env: []string{"DATABASE_URL=" + strings.Replace(direct, pgAddr, dbp.Addr(), 1), "ROLE=" + role,
				"MEMBER_ID=" + fmt.Sprintf("%s-%d", role, i%2), "LISTEN_ADDR=" + listen, "HEALTH_ADDR=" + health,
				"CONVERGE_SECRET_KEY=" + secretKey, "CONVERGE_CALLBACK_KEY=" + callbackKey, "LOG_LEVEL=warn",
				"CONVERGE_DATA_DIR=" + filepath.Join(res.dir, fmt.Sprintf("%s-%d", role, i%2)), "REAPER_RETRY_WINDOW=10s"}}
		dbProxies[p] = dbp
		if role == "control" {
			p.ready = "http://" + listen + "/readyz"
			controls = append(controls, p)
		} else {
			cb := newProxy(listen)
			callbackProxies[p] = cb
			p.env = append(p.env, "CALLBACK_BASE_URL=http://"+cb.Addr())
			p.ready = "http://" + health + "/readyz"
			dispatchers = append(dispatchers, p)
		}
	}
	secret := "whsec_" + newKey(32)
	callLog := filepath.Join(res.dir, "provider-calls.jsonl")
	provider := &proc{name: "provider", bin: filepath.Join(bin, "chaos-provider"), logDir: res.dir,
		env: []string{"PROVIDER_ADDR=" + providerAddr, "PROVIDER_SECRETS=" + secret}}
	start := time.Now()
	if plan != nil {
		faultsUntil = start.Add(plan[len(plan)-1].at + 20*time.Second).UnixMilli()
	}
	provider.args0 = func(boot int) []string {
		a := []string{"-seed", fmt.Sprint(s.seed), "-log", callLog, "-boot", fmt.Sprint(boot), "-work", workTime.String(), "-sync-budget", "1s",
			"-hang", fmt.Sprint(requestTimeout+2) + "s", "-late-for", "10s"}
		if faultsUntil > 0 {
			a = append(a, "-faults-until", fmt.Sprint(faultsUntil), "-latency", "200ms", "-p-5xx", "0.1", "-p-timeout", "0.08",
				"-p-async", "0.4", "-p-drop", "0.25", "-p-dup", "0.35")
		}
		return a
	}
	provider.ready = "http://" + providerAddr + "/"
	all := append(append([]*proc{}, controls...), dispatchers...)
	for _, p := range append(all, provider) {
		must(p.start())
	}
	defer func() {
		var wg sync.WaitGroup
		for _, p := range append(all, provider) {
			wg.Go(p.stop)
		}
		wg.Wait()
	}()
	for _, p := range all {
		must(p.waitReady(90 * time.Second))
	}
	must(waitListening(providerAddr, 30*time.Second))

	api := &apiClient{controls: controls}
	for _, m := range []map[string]any{
		{"kind": "leaf", "kind_version": 1, "task_deadline_secs": taskDeadline,
			"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status","conditions"]}]`)},
		{"kind": "comp", "kind_version": 1, "task_deadline_secs": taskDeadline,
			"reactions": json.RawMessage(`[{"name":"compose","trigger":"specChange","emits":["children","status"]},
				{"name":"rollup","trigger":"childrenSettled","emits":["status","conditions"]}]`)},
	} {
		must(api.do(ctx, "PUT", fmt.Sprintf("/kinds/%s/manifest", m["kind"]), m, nil))
	}
	url := "http://" + providerProxy.Addr() + "/"
	must(api.do(ctx, "POST", "/endpoints", map[string]any{"name": "chaos", "secret": secret,
		"kinds":  []map[string]any{{"kind": "leaf", "kind_version": 1}, {"kind": "comp", "kind_version": 1}},
		"target": map[string]any{"type": "https", "url": url}, "max_concurrency": s.concurrency, "request_timeout_secs": requestTimeout,
		"health": map[string]any{"url": url, "interval_secs": 1, "healthy_threshold": 1, "unhealthy_threshold": 2}}, nil))

	// The workload: about half the resources are in composites (a comp
	// and the childrenPer leaves it composes), the rest standalone leaves.
	comps := s.resources / (childrenPer + 1) / 2
	leaves := s.resources - comps*(childrenPer+1)
	var body bytes.Buffer
	for i := range comps {
		fmt.Fprintf(&body, `{"kind":"comp","kind_version":1,"name":"comp-%d","spec":{"children":%d}}`+"\n", i, childrenPer)
	}
	for i := range leaves {
		fmt.Fprintf(&body, `{"kind":"leaf","kind_version":1,"name":"leaf-%d","spec":{"i":%d}}`+"\n", i, i)
	}
	fmt.Printf("chaos: %s run: %d comps of %d leaves and %d standalone leaves, logs in %s\n", label, comps, childrenPer, leaves, res.dir)
	start = time.Now()
	must(api.batch(ctx, body.Bytes()))

	// Faults, and the sampler of lapsed claims, until everything converged.
	var (
		wmu       sync.Mutex
		windows   []Window
		samples   []ClaimSample
		faultWG   sync.WaitGroup
		sampleEnd = make(chan struct{})
	)
	disrupt := func(from time.Time, to time.Time) {
		wmu.Lock()
		windows = append(windows, Window{From: from, To: to.Add(rejoin)})
		wmu.Unlock()
	}
	// restartAfter starts p again after down, as a supervisor would: a
	// converge process that cannot reach its database at boot exits
	// (its migration step fails), and is started again after a second, up to
	// five times, the way a Deployment restarts a crashed pod.
	restartAfter := func(p *proc, down time.Duration) {
		time.Sleep(down)
		var err error
		for attempt := range 5 {
			if err = p.start(); err == nil {
				err = p.waitReady(90 * time.Second)
			}
			if !errors.Is(err, errExited) {
				break
			}
			wmu.Lock()
			res.bootExits++
			wmu.Unlock()
			fmt.Printf("chaos: %s %s exited at boot (attempt %d, see its log); starting it again\n", label, p.name, attempt+1)
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Errorf("seed %d: restart %s: %v", s.seed, p.name, err)
		}
	}
	// takeDown picks the process a kill fault takes down: its target, or the
	// other one of its role if a fault already has the target down.
	takeDown := func(pool []*proc, target int) *proc {
		for i := range pool {
			if p := pool[(target+i)%len(pool)]; p.down.TryLock() {
				return p
			}
		}
		return nil
	}
	inject := func(f fault) {
		defer faultWG.Done()
		at := time.Now()
		var victim *proc
		switch f.kind {
		case "kill-control":
			victim = takeDown(controls, f.target)
		case "kill-dispatch":
			victim = takeDown(dispatchers, f.target)
		case "kill-provider":
			victim = takeDown([]*proc{provider}, 0)
		}
		if strings.HasPrefix(f.kind, "kill-") {
			if victim == nil {
				fmt.Printf("chaos: %s +%s %s skipped: every such process is already down\n", label, time.Since(start).Round(100*time.Millisecond), f.kind)
				return
			}
			defer victim.down.Unlock()
		}
		wmu.Lock()
		res.faults[f.kind]++
		wmu.Unlock()
		name := ""
		if victim != nil {
			name = " " + victim.name
		}
		fmt.Printf("chaos: %s +%s %s%s target %d for %s\n", label, time.Since(start).Round(100*time.Millisecond), f.kind, name, f.target, f.down)
		switch f.kind {
		case "kill-control":
			victim.kill()
			restartAfter(victim, f.down)
			disrupt(at, time.Now())
		case "kill-dispatch":
			victim.kill()
			restartAfter(victim, f.down)
		case "kill-provider":
			provider.kill()
			time.Sleep(f.down)
			if err := provider.start(); err != nil {
				t.Errorf("seed %d: restart the provider: %v", s.seed, err)
			}
		case "restart-postgres":
			pid, err := postmasterPID(pg.DataDir())
			if err != nil {
				t.Errorf("seed %d: %v", s.seed, err)
				return
			}
			_ = syscall.Kill(pid, syscall.SIGQUIT) // what pg_ctl stop -m immediate sends
			if err := waitListening(pgAddr, 60*time.Second); err != nil {
				t.Errorf("seed %d: postgres did not come back: %v", s.seed, err)
			}
			for db.Ping(ctx) != nil && time.Since(at) < time.Minute {
				time.Sleep(100 * time.Millisecond)
			}
			disrupt(at, time.Now())
		case "cut-db":
			p := all[f.target]
			dbProxies[p].Cut(f.down)
			time.Sleep(f.down)
			if slices.Contains(controls, p) {
				disrupt(at, time.Now())
			}
		case "cut-provider":
			providerProxy.Cut(f.down)
			time.Sleep(f.down)
		case "cut-callback":
			callbackProxies[dispatchers[f.target%2]].Cut(f.down)
			time.Sleep(f.down)
		}
	}
	faultWG.Add(len(plan))
	go func() {
		for _, f := range plan {
			time.Sleep(time.Until(start.Add(f.at)))
			go inject(f)
		}
	}()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sampleEnd:
				return
			case <-t.C:
			}
			got, err := lapsedClaims(ctx, db)
			if err == nil {
				wmu.Lock()
				samples = append(samples, got...)
				res.sampled++
				wmu.Unlock()
			}
		}
	}()
	limit := 15 * time.Minute
	done := false
	for time.Since(start) < limit && !done {
		time.Sleep(time.Second)
		var n int
		var busy bool
		if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE phase = 'Ready' AND synced_gen = generation),
			EXISTS (SELECT 1 FROM work_queue) OR EXISTS (SELECT 1 FROM work_outbox) FROM resources`).Scan(&n, &busy); err != nil {
			continue
		}
		res.converged = n
		done = n == s.resources && !busy
	}
	res.took = time.Since(start)
	faultWG.Wait()
	close(sampleEnd)
	if !done {
		res.violations = append(res.violations, fmt.Sprintf("%s run: %d of %d resources converged after %s", label, res.converged, s.resources, limit))
	}
	fmt.Printf("chaos: %s run converged %d of %d in %s\n", label, res.converged, s.resources, res.took.Round(100*time.Millisecond))

	// The checks.
	rs, err := readResources(ctx, db)
	must(err)
	acc, err := readApplied(ctx, db)
	must(err)
	evs, err := readEvents(ctx, db)
	must(err)
	calls, err := calllog.Read(callLog)
	must(err)
	res.applied, res.samples = len(acc), len(samples)
	tally, lateAnswers := map[string]int{}, map[string]int{}
	for _, c := range calls {
		if c.Type == calllog.Callback && c.Answer == "sending" && c.Fault != "late" {
			continue // counted once, with converge's answer (late ones below)
		}
		switch c.Type {
		case calllog.Delivery:
			res.deliveries++
		case calllog.Work:
			res.works++
		case calllog.Callback:
			res.callbacks++
		}
		if c.Fault != "" {
			tally[c.Fault]++
		}
		if c.Type == calllog.Delivery && c.Answer == "202" {
			tally["async-202"]++
		}
		if c.Fault == "late" && c.Answer == "sending" {
			tally["late"]-- // counted once, with converge's answer
		}
		if c.Fault == "late" && c.Answer != "sending" {
			lateAnswers[c.Answer]++
		}
	}
	var tparts []string
	for _, k := range []string{"5xx", "timeout", "async-202", "drop", "dup-first", "late"} {
		tparts = append(tparts, fmt.Sprintf("%s %d", strings.TrimSuffix(k, "-first"), tally[k]))
		if plan != nil && tally[k] == 0 {
			res.violations = append(res.violations, fmt.Sprintf("provider fault %s was never injected: the run tested less than it claims (raise CHAOS_RESOURCES)", k))
		}
	}
	res.providerTally = strings.Join(tparts, ", ") + fmt.Sprintf(" (late callbacks by converge's answer: %v)", lateAnswers)
	wmu.Lock()
	defer wmu.Unlock()
	res.violations = append(res.violations, CheckConverged(rs, s.resources)...)
	res.violations = append(res.violations, CheckSynced(rs)...)
	res.violations = append(res.violations, CheckApplies(acc, calls)...)
	res.violations = append(res.violations, CheckClaims(samples, reaperPass+claimSlack, windows)...)
	res.violations = append(res.violations, CheckEvents(rs, evs)...)
	return res
}

// runDir is where the runs keep their processes' logs and the provider's
// call log: kept when the test fails (the failure names it), else removed.
func runDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "converge-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	})
	return dir
}

func waitListening(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func postmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// apiClient calls the API of whichever control process answers.
type apiClient struct{ controls []*proc }

func (a *apiClient) base(i int) string {
	return strings.TrimSuffix(a.controls[i%len(a.controls)].ready, "/readyz") + "/api/v1"
}

func (a *apiClient) do(ctx context.Context, method, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return a.send(ctx, method, path, "application/json", b, out)
}

func (a *apiClient) batch(ctx context.Context, ndjson []byte) error {
	var res struct{ Created, Unchanged, Invalid int }
	if err := a.send(ctx, "POST", "/resources:batch", "application/x-ndjson", ndjson, &res); err != nil {
		return err
	}
	if res.Invalid != 0 {
		return fmt.Errorf("batch: %d invalid", res.Invalid)
	}
	return nil
}

func (a *apiClient) send(ctx context.Context, method, path, ctype string, body []byte, out any) error {
	var last string
	for attempt := range 60 {
		req, err := http.NewRequestWithContext(ctx, method, a.base(attempt)+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			time.Sleep(500 * time.Millisecond)
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode < 300 {
			if out != nil {
				return json.Unmarshal(data, out)
			}
			return nil
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, data)
		if resp.StatusCode < 500 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("%s %s: %s", method, path, last)
}

// installApplyLog records every outcome the engine applies. Applying one
// (where the completion arrives, or in the drain for a composition) ends
// its claim, deleting or re-pending the claimed work row (logged by a
// trigger: the task's claim, trigger and generation), and writes the
// outcome to its resource, naming the task and claim_epoch (logged by an
// update trigger: the status and whether it succeeded), in one
// transaction. A claim ended otherwise (the reaper re-pending a lapsed
// lease) names no resource write and is not counted. Each outcome's status
// names the claim the provider produced it under.
func installApplyLog(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, `
CREATE TABLE chaos_finished (resource_id uuid, generation bigint, task_id uuid, claim_epoch bigint, trigger text);
CREATE FUNCTION chaos_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_finished VALUES (OLD.resource_id, OLD.claimed_gen, OLD.task_id, OLD.claim_epoch, OLD.trigger);
    RETURN NULL;
END
$$;
CREATE TRIGGER chaos_finished AFTER DELETE OR UPDATE OF state ON work_queue
    FOR EACH ROW WHEN (OLD.state = 'claimed') EXECUTE FUNCTION chaos_finished();
CREATE TABLE chaos_applied (resource_id uuid, task_id uuid, claim_epoch bigint, success bool, status jsonb);
CREATE FUNCTION chaos_applied() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_applied VALUES (NEW.id, NEW.last_task_id, NEW.last_task_epoch, NEW.last_error IS NULL, NEW.status);
    RETURN NULL;
END
$$;
CREATE TRIGGER chaos_applied AFTER UPDATE ON resources FOR EACH ROW
    WHEN (NEW.last_task_id IS DISTINCT FROM OLD.last_task_id OR NEW.last_task_epoch IS DISTINCT FROM OLD.last_task_epoch)
    EXECUTE FUNCTION chaos_applied();`)
	return err
}

// breakFence is the deliberately broken build (CHAOS_BREAK_FENCE=1): it
// rewrites the statements that finish a claimed work row, the deletes of
// a plain success (complete_plain, finish_successes) and the lock of every
// other outcome (complete_tasks), without their claim_epoch condition, so an outcome is
// accepted for whatever claim holds the task now. The engine checksums are
// left alone, so the processes do not restore it at boot.
func breakFence(ctx context.Context, db *pgxpool.Pool) error {
	const fence = "w.claim_epoch = i.epoch AND w.state = 'claimed'"
	for _, fn := range []string{"complete_plain", "finish_successes", "complete_tasks"} {
		var def string
		if err := db.QueryRow(ctx, `SELECT pg_get_functiondef($1::regproc)`, fn).Scan(&def); err != nil {
			return err
		}
		if !strings.Contains(def, fence) {
			return fmt.Errorf("%s has no %q to remove", fn, fence)
		}
		if _, err := db.Exec(ctx, strings.Replace(def, fence, "w.state = 'claimed'", 1)); err != nil {
			return err
		}
	}
	return nil
}

func lapsedClaims(ctx context.Context, db *pgxpool.Pool) ([]ClaimSample, error) {
	rows, err := db.Query(ctx, `SELECT now(), lease_until, task_id::text, claim_epoch FROM work_queue w
		WHERE state = 'claimed' AND lease_until < now()
		  AND NOT EXISTS (SELECT 1 FROM work_outbox o WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)`)
	if err != nil {
		return nil, err
	}
	var out []ClaimSample
	for rows.Next() {
		var s ClaimSample
		if err := rows.Scan(&s.At, &s.LeaseUntil, &s.TaskID, &s.ClaimEpoch); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func readResources(ctx context.Context, db *pgxpool.Pool) ([]Resource, error) {
	rows, err := db.Query(ctx, `SELECT id::text, kind, name, phase, generation, synced_gen FROM resources`)
	if err != nil {
		return nil, err
	}
	var out []Resource
	for rows.Next() {
		var r Resource
		if err := rows.Scan(&r.ID, &r.Kind, &r.Name, &r.Phase, &r.Generation, &r.SyncedGen); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func readApplied(ctx context.Context, db *pgxpool.Pool) ([]Applied, error) {
	rows, err := db.Query(ctx, `SELECT f.resource_id::text, f.task_id::text, f.trigger, f.generation, f.claim_epoch, a.success,
		coalesce(a.status->>'task', ''), coalesce((a.status->>'epoch')::bigint, 0)
		FROM chaos_finished f JOIN (SELECT DISTINCT * FROM chaos_applied) a
		  ON a.resource_id = f.resource_id AND a.task_id = f.task_id AND a.claim_epoch = f.claim_epoch`)
	if err != nil {
		return nil, err
	}
	var out []Applied
	for rows.Next() {
		var a Applied
		if err := rows.Scan(&a.ResourceID, &a.TaskID, &a.Trigger, &a.Generation, &a.ClaimEpoch, &a.Success, &a.StatusTask, &a.StatusEpoch); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

func readEvents(ctx context.Context, db *pgxpool.Pool) ([]Event, error) {
	rows, err := db.Query(ctx, `SELECT id, resource_id::text, type, generation FROM resource_events`)
	if err != nil {
		return nil, err
	}
	var out []Event
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.ID, &e.ResourceID, &e.Type, &e.Generation); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
