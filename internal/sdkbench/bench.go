package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/transport"
	"github.com/convergeplane/converge/dispatch/wire"
	"github.com/convergeplane/converge/webhooksdk"
)

// errUsage marks a bad flag value.
var errUsage = errors.New("usage")

// Config is one run's shape.
type Config struct {
	Root        string // the repository's root
	SDKs        []SDK
	Rounds      int
	Singles     int // single-task requests per SDK per round
	Batches     int // batch requests per SDK per round
	BatchSize   int
	Concurrency int
	// Ready bounds the wait for a server's first healthy answer.
	Ready time.Duration
}

func defaultConfig() Config {
	return Config{SDKs: sdks, Rounds: 5, Singles: 2000, Batches: 100, BatchSize: 32, Concurrency: 8, Ready: 2 * time.Minute}
}

func (c Config) validate() error {
	for _, v := range []struct {
		name string
		v    int
		min  int
	}{{"rounds", c.Rounds, 1}, {"singles", c.Singles, 1}, {"batches", c.Batches, 1}, {"batch-size", c.BatchSize, 2}, {"concurrency", c.Concurrency, 1}} {
		if v.v < v.min {
			return fmt.Errorf("%w: -%s %d: must be at least %d", errUsage, v.name, v.v, v.min)
		}
	}
	if _, err := os.Stat(filepath.Join(c.Root, "go.mod")); err != nil {
		return fmt.Errorf("%w: -root %s is not the repository's root: %v", errUsage, c.Root, err)
	}
	return nil
}

// SDK is one SDK's bench server: the file that must exist, and the command
// starting it (run from the repository's root; "{bin}" is a folder for
// built binaries).
type SDK struct {
	Name string
	File string // relative to the root
	// Build, if set, runs before the server is started.
	Build []string
	Cmd   []string
}

var sdks = []SDK{
	{Name: "go", File: "internal/sdkbench/goserver/main.go",
		Build: []string{"go", "build", "-o", "{bin}/goserver", "./internal/sdkbench/goserver"},
		Cmd:   []string{"{bin}/goserver"}},
	{Name: "typescript", File: "sdk/typescript/bench/server.mjs", Cmd: []string{"node", "sdk/typescript/bench/server.mjs"}},
	{Name: "python", File: "sdk/python/bench/server.py", Cmd: []string{"/usr/bin/python3", "sdk/python/bench/server.py"}},
}

// benchKind is the kind every bench server serves.
var benchKind = webhooksdk.KindVersion{Kind: "bench", Version: 1}

// server is one running bench server.
type server struct {
	sdk    SDK
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	target *transport.HTTPS
	// results per round
	single, batch []phase
}

// phase is what one load phase measured.
type phase struct {
	tasks int
	wall  time.Duration
	cpu   time.Duration // the server's user + system time
}

func (p phase) perTask() (wall, cpu float64) {
	n := float64(p.tasks)
	return float64(p.wall.Microseconds()) / n, float64(p.cpu.Microseconds()) / n
}

type bench struct {
	cfg     Config
	out     io.Writer
	bin     string
	signer  *webhooksdk.Signer
	secret  string
	servers []*server
	// claims numbers the claims sent, so every task id and webhook-id is new
	// (a repeated one would be answered from the SDK's result cache).
	claims atomic.Int64
}

func newBench(ctx context.Context, cfg Config, out, errOut io.Writer) (*bench, error) {
	secret, err := webhooksdk.GenerateSecret()
	if err != nil {
		return nil, err
	}
	signer, err := webhooksdk.NewSigner(secret)
	if err != nil {
		return nil, err
	}
	bin, err := os.MkdirTemp("", "sdkbench")
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, out: out, bin: bin, signer: signer, secret: secret}
	fmt.Fprintf(out, "sdk serving overhead: kind %s, %d rounds of %d single tasks and %d batches of %d, %d in flight\n",
		benchKind, cfg.Rounds, cfg.Singles, cfg.Batches, cfg.BatchSize, cfg.Concurrency)
	for _, sdk := range cfg.SDKs {
		if _, err := os.Stat(filepath.Join(cfg.Root, sdk.File)); err != nil {
			fmt.Fprintf(out, "%-10s  skipped: %s does not exist (yet)\n", sdk.Name, sdk.File)
			continue
		}
		s, err := b.start(ctx, sdk, errOut)
		if err != nil {
			b.close()
			return nil, fmt.Errorf("%s: %w", sdk.Name, err)
		}
		b.servers = append(b.servers, s)
		fmt.Fprintf(out, "%-10s  %s (pid %d)\n", sdk.Name, sdk.File, s.cmd.Process.Pid)
	}
	if len(b.servers) == 0 {
		b.close()
		return nil, errors.New("no SDK's bench server exists")
	}
	return b, nil
}

func (b *bench) expand(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, "{bin}", b.bin)
	}
	return out
}

// start builds and starts sdk's server and waits for its healthy answer.
func (b *bench) start(ctx context.Context, sdk SDK, errOut io.Writer) (*server, error) {
	if len(sdk.Build) > 0 {
		args := b.expand(sdk.Build)
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir = b.cfg.Root
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := b.expand(sdk.Cmd)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = b.cfg.Root
	cmd.Env = append(os.Environ(), "BENCH_ADDR="+addr, "BENCH_SECRET="+b.secret)
	cmd.Stdout, cmd.Stderr = errOut, errOut
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{sdk: sdk, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: b.cfg.Concurrency, MaxIdleConnsPerHost: b.cfg.Concurrency, IdleConnTimeout: time.Minute,
	}}
	s.target = transport.NewHTTPS(client, "http://"+addr+"/", "converge-sdkbench", 16<<20)
	if err := b.waitHealthy(ctx, s); err != nil {
		stopServer(s)
		return nil, err
	}
	return s, nil
}

// freeAddr is a loopback address no one listens on right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// waitHealthy probes s until it answers the health probe with bench/1
// ready, it exits, or cfg.Ready passes.
func (b *bench) waitHealthy(ctx context.Context, s *server) error {
	deadline := time.Now().Add(b.cfg.Ready)
	body := []byte(`{"type":"health"}`)
	var last error
	for {
		resp, err := b.send(ctx, s, newMsgID(&b.claims), body)
		if err == nil {
			var h webhooksdk.HealthResponse
			switch {
			case resp.Status != http.StatusOK:
				last = fmt.Errorf("health answered %d: %s", resp.Status, resp.Body)
			case json.Unmarshal(resp.Body, &h) != nil:
				last = fmt.Errorf("health answer is not JSON: %s", resp.Body)
			case !slices.ContainsFunc(h.Kinds, func(k webhooksdk.KindReadiness) bool {
				return k.Kind == benchKind.Kind && k.KindVersion == benchKind.Version && k.Ready
			}):
				last = fmt.Errorf("health answer does not list %s ready: %s", benchKind, resp.Body)
			default:
				return nil
			}
		} else {
			last = err
		}
		select {
		case <-s.exited:
			return fmt.Errorf("the server exited before it answered the health probe: %v", s.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no healthy answer within %s: %w", b.cfg.Ready, last)
		}
	}
}

func newMsgID(n *atomic.Int64) string {
	return "msg_health_" + strconv.FormatInt(n.Add(1), 10)
}

// send signs body under msgID and posts it, as the dispatcher does.
func (b *bench) send(ctx context.Context, s *server, msgID string, body []byte) (*transport.Response, error) {
	now := time.Now()
	return s.target.Deliver(ctx, &transport.Delivery{MsgID: msgID, Timestamp: now, Signature: b.signer.Sign(msgID, now, body), Body: body})
}

// measure warms every server up, then runs the rounds and prints the report.
func (b *bench) measure(ctx context.Context) error {
	for _, s := range b.servers {
		if _, err := b.load(ctx, s, max(b.cfg.Singles/10, 1), 1); err != nil {
			return fmt.Errorf("%s: warm-up: %w", s.sdk.Name, err)
		}
		if _, err := b.load(ctx, s, max(b.cfg.Batches/10, 1), b.cfg.BatchSize); err != nil {
			return fmt.Errorf("%s: warm-up: %w", s.sdk.Name, err)
		}
	}
	for r := range b.cfg.Rounds {
		fmt.Fprintf(b.out, "round %d:", r+1)
		for i := range b.servers {
			s := b.servers[(i+r)%len(b.servers)]
			single, err := b.load(ctx, s, b.cfg.Singles, 1)
			if err != nil {
				return fmt.Errorf("%s: %w", s.sdk.Name, err)
			}
			batch, err := b.load(ctx, s, b.cfg.Batches, b.cfg.BatchSize)
			if err != nil {
				return fmt.Errorf("%s: %w", s.sdk.Name, err)
			}
			s.single, s.batch = append(s.single, single), append(s.batch, batch)
			sw, sc := single.perTask()
			bw, bc := batch.perTask()
			fmt.Fprintf(b.out, "  %s %.1f/%.1f %.1f/%.1f", s.sdk.Name, sw, sc, bw, bc)
		}
		fmt.Fprintln(b.out)
	}
	b.report()
	return nil
}

// report prints the medians and the ratios to the Go SDK's.
func (b *bench) report() {
	fmt.Fprintln(b.out, "\nper task, median of the rounds, µs (wall = elapsed / tasks with the requests in flight; cpu = the server's):")
	fmt.Fprintf(b.out, "%-10s  %12s %12s %8s %8s  %12s %12s %8s %8s\n", "sdk",
		"single wall", "single cpu", "×go", "×go cpu", "batch wall", "batch cpu", "×go", "×go cpu")
	var base *server
	for _, s := range b.servers {
		if s.sdk.Name == "go" {
			base = s
		}
	}
	for _, s := range b.servers {
		sw, sc := median(s.single)
		bw, bc := median(s.batch)
		ratio := func(v float64, of func(*server) float64) string {
			if base == nil || of(base) == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", v/of(base))
		}
		fmt.Fprintf(b.out, "%-10s  %12.1f %12.1f %8s %8s  %12.1f %12.1f %8s %8s\n", s.sdk.Name,
			sw, sc, ratio(sw, func(g *server) float64 { w, _ := median(g.single); return w }),
			ratio(sc, func(g *server) float64 { _, c := median(g.single); return c }),
			bw, bc, ratio(bw, func(g *server) float64 { w, _ := median(g.batch); return w }),
			ratio(bc, func(g *server) float64 { _, c := median(g.batch); return c }))
	}
}

// median is the median per-task wall and CPU time of phases.
func median(ps []phase) (wall, cpu float64) {
	ws, cs := make([]float64, len(ps)), make([]float64, len(ps))
	for i, p := range ps {
		ws[i], cs[i] = p.perTask()
	}
	slices.Sort(ws)
	slices.Sort(cs)
	mid := func(v []float64) float64 {
		n := len(v)
		if n%2 == 1 {
			return v[n/2]
		}
		return (v[n/2-1] + v[n/2]) / 2
	}
	return mid(ws), mid(cs)
}

// load sends requests requests of size tasks each (1: a single envelope;
// more: a batch) from cfg.Concurrency workers, and checks every answer.
func (b *bench) load(ctx context.Context, s *server, requests, size int) (phase, error) {
	cpu0, err := processCPU(s.cmd.Process.Pid)
	if err != nil {
		return phase{}, err
	}
	var next atomic.Int64
	errs := make(chan error, b.cfg.Concurrency)
	start := time.Now()
	var wg sync.WaitGroup
	for range b.cfg.Concurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(requests) {
				if err := b.request(ctx, s, size); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return phase{}, err
	}
	cpu1, err := processCPU(s.cmd.Process.Pid)
	if err != nil {
		return phase{}, err
	}
	return phase{tasks: requests * size, wall: wall, cpu: cpu1 - cpu0}, nil
}

// request sends one delivery of size tasks and checks that each task got an
// inline outcome.
func (b *bench) request(ctx context.Context, s *server, size int) error {
	tasks := make([]model.Task, size)
	envs := make([]webhooksdk.Envelope, size)
	for i := range envs {
		n := b.claims.Add(1)
		tasks[i] = model.Task{ID: fmt.Sprintf("0198f3b2-7c1e-7a00-8000-%012d", n), ClaimEpoch: 1}
		envs[i] = envelope(tasks[i], n)
	}
	var body []byte
	var msgID string
	var err error
	if size == 1 {
		msgID = wire.MessageID(tasks[0])
		body, err = json.Marshal(envs[0])
	} else {
		msgID = wire.BatchID(tasks)
		body, err = json.Marshal(webhooksdk.Batch{Type: webhooksdk.EnvelopeBatch, Tasks: envs})
	}
	if err != nil {
		return err
	}
	resp, err := b.send(ctx, s, msgID, body)
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		return fmt.Errorf("answered %d (want 200 with the outcome inline): %s", resp.Status, resp.Body)
	}
	if size == 1 {
		res, err := wire.DecodeResult(resp.Body, tasks[0].ID, tasks[0].ClaimEpoch)
		if err != nil {
			return err
		}
		return checkOutcome(res)
	}
	answers, err := wire.DecodeBatch(resp.Body, tasks)
	if err != nil {
		return err
	}
	for _, a := range answers {
		if a.Err != nil {
			return a.Err
		}
		if a.Accepted {
			return errors.New("a task of the batch was accepted (202-style); the no-op must answer inline")
		}
		if err := checkOutcome(a.Result); err != nil {
			return err
		}
	}
	return nil
}

func checkOutcome(r webhooksdk.Result) error {
	if r.Error != nil {
		return fmt.Errorf("task %s failed: %s", r.TaskID, r.Error.Message)
	}
	if r.Outcome == nil || !bytes.Equal(bytes.TrimSpace(r.Outcome.Status), []byte("{}")) {
		return fmt.Errorf("task %s: want the outcome {\"status\": {}}, got %+v", r.TaskID, r.Outcome)
	}
	return nil
}

// envelope is task's envelope as the dispatcher sends a leaf's reconcile:
// a resource, a callback with its token, a deadline.
func envelope(t model.Task, n int64) webhooksdk.Envelope {
	return webhooksdk.Envelope{
		Type: webhooksdk.EnvelopeTask, TaskID: t.ID, ClaimEpoch: t.ClaimEpoch, Attempt: 1,
		TaskType: webhooksdk.TaskReconcile, Reaction: "work", Trigger: webhooksdk.TriggerSpecChange,
		Kind: benchKind.Kind, KindVersion: benchKind.Version,
		Resource: &webhooksdk.Resource{
			ID: fmt.Sprintf("0198f3b2-7c1e-7a00-9000-%012d", n), Kind: benchKind.Kind, KindVersion: benchKind.Version,
			Name: fmt.Sprintf("leaf-%d", n), Labels: map[string]string{}, Spec: json.RawMessage(`{"size":1}`), Generation: 1,
		},
		Callback: &webhooksdk.Callback{
			URL:      "http://127.0.0.1:9/v1/tasks/" + t.ID + "/outcome",
			Token:    strings.Repeat("t", 180),
			BatchURL: "http://127.0.0.1:9/v1/tasks:outcomes",
		},
		Deadline: time.Now().Add(time.Minute).UTC().Truncate(time.Second),
	}
}

// processCPU is a process's user + system time so far, all threads, from
// /proc/PID/stat (in clock ticks of 10 ms, Linux's USER_HZ).
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read the server's CPU time: %w", err)
	}
	// The command name (field 2) may hold spaces; fields count from its ')'.
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// close stops every server and removes the built binaries.
func (b *bench) close() {
	for _, s := range b.servers {
		stopServer(s)
	}
	_ = os.RemoveAll(b.bin)
}

// stopServer sends SIGTERM and waits for the exit, killing the process if it
// has not exited within ten seconds.
func stopServer(s *server) {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}
