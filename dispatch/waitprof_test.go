package dispatch_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// waitProf records where one run waits: what the database's backends are
// doing (pg_stat_activity sampled every waitSampleEvery on a connection of
// its own), the pools' acquire statistics, the Go block and mutex profiles,
// and the CPU the machine and this process spent. Start it before the timed
// part of a run and stop it after; add merges runs of one mode.
type waitProf struct {
	// samples counts backend states by statement kind: "kind state wait".
	samples map[string]int
	ticks   int // sampling passes
	pools   poolDelta
	block   map[string]goWait
	mutex   map[string]goWait
	cpu     cpuDelta
}

// waitSampleEvery is the pg_stat_activity sampling interval: short against
// a statement's milliseconds, long enough that the sampler's own query
// stays a small share of a core.
const waitSampleEvery = 5 * time.Millisecond

// poolDelta is what the pools' Stat counters moved by over a run.
type poolDelta struct {
	acquires, emptyAcquires int64
	acquireWait             time.Duration
	maxConns                int32
}

// goWait is one Go wait site's total delay and count.
type goWait struct {
	delay time.Duration
	count int64
}

// cpuDelta is the CPU the machine (/proc/stat) and this process spent.
type cpuDelta struct {
	wall, machineBusy, machineTotal, process time.Duration
}

// waitRun is one run being profiled.
type waitRun struct {
	p      *waitProf
	pools  []*pgxpool.Pool
	before []*pgxpool.Stat
	block  map[string]goWait
	mutex  map[string]goWait
	cpu    [3]time.Duration // machine busy, machine total, process
	start  time.Time
	stop   context.CancelFunc
	done   sync.WaitGroup
}

// startWaits starts profiling a run whose engine connects to dsn through
// pools. Go's block and mutex profiling must be on (enableGoProfiles).
func startWaits(ctx context.Context, dsn string, pools ...*pgxpool.Pool) (*waitRun, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	r := &waitRun{p: newWaitProf(), pools: pools, block: goProfile("block"), mutex: goProfile("mutex"), start: time.Now()}
	for _, p := range pools {
		r.before = append(r.before, p.Stat())
	}
	r.cpu = cpuNow()
	sctx, cancel := context.WithCancel(ctx)
	r.stop = cancel
	r.done.Go(func() {
		defer conn.Close(context.WithoutCancel(ctx))
		tick := time.NewTicker(waitSampleEvery)
		defer tick.Stop()
		for {
			rows, err := conn.Query(sctx, `SELECT state, coalesce(wait_event_type, ''), coalesce(wait_event, ''), query
				FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
			if err != nil {
				return
			}
			for rows.Next() {
				var state, wtype, wevent, query string
				if rows.Scan(&state, &wtype, &wevent, &query) != nil {
					break
				}
				r.p.samples[backendKey(state, wtype, wevent, query)]++
			}
			rows.Close()
			r.p.ticks++
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return r, nil
}

// finish stops the sampler and returns the run's profile.
func (r *waitRun) finish() *waitProf {
	r.stop()
	r.done.Wait()
	for i, p := range r.pools {
		s, b := p.Stat(), r.before[i]
		r.p.pools.acquires += s.AcquireCount() - b.AcquireCount()
		r.p.pools.emptyAcquires += s.EmptyAcquireCount() - b.EmptyAcquireCount()
		r.p.pools.acquireWait += s.AcquireDuration() - b.AcquireDuration()
		r.p.pools.maxConns += s.MaxConns()
	}
	r.p.block = subWaits(goProfile("block"), r.block)
	r.p.mutex = subWaits(goProfile("mutex"), r.mutex)
	now := cpuNow()
	r.p.cpu = cpuDelta{wall: time.Since(r.start), machineBusy: now[0] - r.cpu[0], machineTotal: now[1] - r.cpu[1], process: now[2] - r.cpu[2]}
	return r.p
}

func newWaitProf() *waitProf {
	return &waitProf{samples: map[string]int{}, block: map[string]goWait{}, mutex: map[string]goWait{}}
}

// add merges o into p.
func (p *waitProf) add(o *waitProf) {
	for k, v := range o.samples {
		p.samples[k] += v
	}
	p.ticks += o.ticks
	p.pools.acquires += o.pools.acquires
	p.pools.emptyAcquires += o.pools.emptyAcquires
	p.pools.acquireWait += o.pools.acquireWait
	p.pools.maxConns = max(p.pools.maxConns, o.pools.maxConns)
	for k, v := range o.block {
		p.block[k] = goWait{p.block[k].delay + v.delay, p.block[k].count + v.count}
	}
	for k, v := range o.mutex {
		p.mutex[k] = goWait{p.mutex[k].delay + v.delay, p.mutex[k].count + v.count}
	}
	p.cpu.wall += o.cpu.wall
	p.cpu.machineBusy += o.cpu.machineBusy
	p.cpu.machineTotal += o.cpu.machineTotal
	p.cpu.process += o.cpu.process
}

// statementKinds names the engine's statements by a fragment of their text,
// first match wins.
var statementKinds = []struct{ frag, kind string }{
	{"claim_tasks", "claim"},
	{"complete_tasks", "complete"},
	{"FROM resources r WHERE r.id = ANY", "request"},
	{"providerconfigs", "request"},
	{"endpoint_deliveries", "delivery_log"},
	{"drain_outbox_batch", "drain"},
	{"drain_rollup", "drain"},
	{"extend_leases", "lease"},
	{"release_tasks", "release"},
	{"schedule_eligible", "schedule"},
	{"synced_gen < generation", "bench_probe"},
	{"LISTEN", "listen"},
}

// backendKey is one backend sample's bucket. An idle backend is a pool slot
// nobody is using, whatever it last ran.
func backendKey(state, wtype, wevent, query string) string {
	if state == "idle" {
		if strings.Contains(query, "LISTEN") {
			return "listen idle"
		}
		return "(pool) idle"
	}
	kind := "other"
	for _, s := range statementKinds {
		if strings.Contains(query, s.frag) {
			kind = s.kind
			break
		}
	}
	wait := "cpu"
	if wtype != "" {
		wait = wtype + ":" + wevent
	}
	return kind + " " + state + " " + wait
}

// enableGoProfiles turns on Go's block and mutex profiling (a block of
// 10µs or more is always recorded, shorter ones in proportion) and
// returns the function that turns it off.
func enableGoProfiles() func() {
	runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	prev := runtime.SetMutexProfileFraction(5)
	return func() {
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(prev)
	}
}

// goProfile reads the block or mutex profile, its records keyed by wait
// site: the blocking operation, the library it blocked in (pgx's pool, the
// HTTP client or server) and the first frame of this module's code.
func goProfile(name string) map[string]goWait {
	var buf bytes.Buffer
	_ = pprof.Lookup(name).WriteTo(&buf, 1)
	out := map[string]goWait{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	cyclesPerSec := 1.0
	var (
		cycles, count int64
		frames        []string
		inRecord      bool
	)
	flushRecord := func() {
		if inRecord && len(frames) > 0 {
			k := waitSite(frames)
			d := time.Duration(float64(cycles) / cyclesPerSec * float64(time.Second))
			out[k] = goWait{out[k].delay + d, out[k].count + count}
		}
		inRecord, frames = false, nil
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "cycles/second="):
			if v, err := strconv.ParseFloat(strings.TrimPrefix(line, "cycles/second="), 64); err == nil {
				cyclesPerSec = v
			}
		case strings.HasPrefix(line, "#\t"):
			if f := strings.Fields(line); len(f) >= 3 {
				frames = append(frames, f[2])
			}
		case strings.Contains(line, " @ "):
			flushRecord()
			f := strings.Fields(line)
			cycles, _ = strconv.ParseInt(f[0], 10, 64)
			count, _ = strconv.ParseInt(f[1], 10, 64)
			inRecord = true
		}
	}
	flushRecord()
	return out
}

// waitSite names a wait by its stack (innermost first, offsets cut): the
// blocking primitive, the library it blocked in and this module's frame
// nearest to it.
func waitSite(frames []string) string {
	for i, f := range frames {
		if j := strings.LastIndex(f, "+0x"); j > 0 {
			frames[i] = f[:j]
		}
	}
	prim := frames[0]
	for p, name := range map[string]string{"runtime.chansend": "chan send", "runtime.chanrecv": "chan recv",
		"runtime.selectgo": "select", "sync.(*Mutex)": "mutex", "sync.(*RWMutex)": "rwmutex", "sync.(*Cond).Wait": "cond",
		"sync.(*WaitGroup).Wait": "waitgroup"} {
		for _, f := range frames[:min(len(frames), 3)] {
			if strings.HasPrefix(f, p) {
				prim = name
			}
		}
	}
	var lib, own string
	for _, f := range frames {
		switch {
		case lib == "" && (strings.Contains(f, "puddle") || strings.Contains(f, "pgxpool")):
			lib = " (pgxpool)"
		case lib == "" && strings.HasPrefix(f, "net/http."):
			lib = " (net/http)"
		case own == "" && strings.HasPrefix(f, "github.com/convergeplane/converge/"):
			own = strings.TrimPrefix(f, "github.com/convergeplane/converge/")
		}
	}
	return prim + lib + " in " + cmp.Or(own, "?")
}

func subWaits(after, before map[string]goWait) map[string]goWait {
	out := map[string]goWait{}
	for k, v := range after {
		if d := (goWait{v.delay - before[k].delay, v.count - before[k].count}); d.count > 0 {
			out[k] = d
		}
	}
	return out
}

// cpuNow returns the machine's busy and total CPU time (/proc/stat) and
// this process's CPU time.
func cpuNow() [3]time.Duration {
	var out [3]time.Duration
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		var busy, total int64
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseInt(f, 10, 64)
			total += v
			if i != 3 && i != 4 { // idle, iowait
				busy += v
			}
		}
		const tick = 10 * time.Millisecond // USER_HZ 100
		out[0], out[1] = time.Duration(busy)*tick, time.Duration(total)*tick
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out[2] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return out
}

// report prints the profile: the backend states as shares of the sampled
// backends, the pools, the CPU and the top Go waits.
func (p *waitProf) report(name string) {
	total := 0
	for _, v := range p.samples {
		total += v
	}
	keys := slices.SortedFunc(func(yield func(string) bool) {
		for k := range p.samples {
			if !yield(k) {
				return
			}
		}
	}, func(a, b string) int { return cmp.Compare(p.samples[b], p.samples[a]) })
	logf("waits %s: %d samples of %d passes, %.1f backends on average", name, total, p.ticks, float64(total)/float64(max(p.ticks, 1)))
	for _, k := range keys {
		if share := float64(p.samples[k]) / float64(total); share >= 0.005 {
			logf("  db   %-52s %5.1f%%  %.2f backends", k, 100*share, float64(p.samples[k])/float64(max(p.ticks, 1)))
		}
	}
	pd := p.pools
	logf("  pool acquires %d, empty (waited for a slot) %d (%.1f%%), acquire wait %.1f ms in all (%.1f µs each), max conns %d",
		pd.acquires, pd.emptyAcquires, 100*float64(pd.emptyAcquires)/float64(max(pd.acquires, 1)),
		pd.acquireWait.Seconds()*1000, float64(pd.acquireWait.Microseconds())/float64(max(pd.acquires, 1)), pd.maxConns)
	c := p.cpu
	logf("  cpu  machine %.0f%% busy of %d cores; this process %.2f cores (the rest is PostgreSQL and the other agents)",
		100*c.machineBusy.Seconds()/max(c.machineTotal.Seconds(), 1e-9), runtime.NumCPU(), c.process.Seconds()/max(c.wall.Seconds(), 1e-9))
	for _, prof := range []struct {
		name  string
		waits map[string]goWait
	}{{"block", p.block}, {"mutex", p.mutex}} {
		keys := slices.SortedFunc(func(yield func(string) bool) {
			for k := range prof.waits {
				if !yield(k) {
					return
				}
			}
		}, func(a, b string) int { return cmp.Compare(prof.waits[b].delay, prof.waits[a].delay) })
		for i, k := range keys {
			if i == 12 {
				break
			}
			w := prof.waits[k]
			logf("  go %-5s %9.1f ms %7d× %s", prof.name, w.delay.Seconds()*1000, w.count, k)
		}
	}
	fmt.Println()
}
