package stdcel

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// chain returns an n-resource graph: each resource after the first reads the previous
// one's status (an edge with a value flow) and spec, and the root's inputs.
func chain(n int) string {
	rs := []string{res("r0", `{"zone": "${schema.spec.zone}"}`)}
	for i := 1; i < n; i++ {
		rs = append(rs, fmt.Sprintf(`{"id": "r%d", "includeWhen": ["${schema.spec.count >= %d}"], "readyWhen": ["${r%d.status.ok == true}"],
		  "template": {"kind": "k", "kind_version": 1, "name": "${schema.metadata.name}-%d",
		  "spec": {"up": "${r%d.status.id}", "zone": "${r%d.spec.zone}", "label": "n-${schema.spec.count - %d}"}}}`, i, i, i, i, i-1, i-1, i))
	}
	return `{"resources": [` + strings.Join(rs, ",\n") + `]}`
}

const chainSpec = `{"zone": "eu-1", "count": 1000}`

// BenchmarkCompose1000 composes a 1,000-resource graph: cold (compile and compose, a
// new config) and warm (a reconcile with the cached graph), beside JSON-decoding the
// same config as a baseline. The cold compose must use under a second of CPU.
func BenchmarkCompose1000(b *testing.B) {
	config := chain(1000)
	b.Run("baseline-json-decode", func(b *testing.B) {
		for b.Loop() {
			var c Config
			if err := json.Unmarshal([]byte(config), &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cold", func(b *testing.B) {
		cpu := cpuTime(b)
		for b.Loop() {
			composeOnce(b, New("stdcel"), config, 1000)
		}
		// CPU time, since the wall clock on a shared machine measures the neighbours.
		per := (cpuTime(b) - cpu) / time.Duration(b.N)
		b.ReportMetric(per.Seconds(), "cpu-s/op")
		if per > time.Second {
			b.Fatalf("a cold 1,000-resource compose used %v of CPU, want under 1s", per)
		}
	})
	b.Run("warm", func(b *testing.B) {
		p := New("stdcel")
		for b.Loop() {
			composeOnce(b, p, config, 1000)
		}
		hits, misses := p.(*Provider).CacheStats()
		b.ReportMetric(float64(hits)/float64(hits+misses)*100, "%hit")
	})
}

func composeOnce(tb testing.TB, p webhooksdk.Provider, config string, want int) {
	tb.Helper()
	out, err := sdktest.Run(tb, p, request("compose", config, chainSpec))
	if err != nil {
		tb.Fatal(err)
	}
	if len(out.Children) != want || len(out.Edges) != want-1 {
		tb.Fatalf("%d children and %d edges, want %d and %d", len(out.Children), len(out.Edges), want, want-1)
	}
}

// TestCacheHitRate reconciles 1,000 resources 100 times with one config: the graph
// compiles once, and 99% or more of the lookups hit the cache.
func TestCacheHitRate(t *testing.T) {
	p := New("stdcel")
	config := chain(1000)
	start := time.Now()
	for range 100 {
		composeOnce(t, p, config, 1000)
	}
	hits, misses := p.(*Provider).CacheStats()
	rate := float64(hits) / float64(hits+misses)
	t.Logf("100 reconciles of a 1,000-resource graph in %v: %d hits, %d misses, hit rate %.2f%%",
		time.Since(start), hits, misses, rate*100)
	if misses != 1 || rate < 0.99 {
		t.Errorf("hits %d, misses %d: want one compile and a hit rate of 99%% or more", hits, misses)
	}
	// A new config compiles once more; the old one is still cached.
	composeOnce(t, p, chain(10), 10)
	composeOnce(t, p, config, 1000)
	if _, m := p.(*Provider).CacheStats(); m != 2 {
		t.Errorf("misses = %d after one new config, want 2", m)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
