// Package provider is the classic demo's providers, written only against
// webhooksdk (and aws-sdk-go-v2's s3 client for statussink), the way an
// external team would write them:
//
//   - classicbom/1: the composer. Its spec is a BOM of functional domains ×
//     service teams; it fans out, per team, an account, a vpc in it and a
//     route from the vpc to the domain's transit gateway, and per domain with
//     networking a tgw and the tgw-host account it lives in. The edges carry
//     the value flows: vpc.account_id ← account, tgw.account_id ← tgw-host
//     account, route.vpc_id ← vpc and route.tgw_id ← tgw. Its rollup folds
//     the subtree's readiness into its status.
//   - account/1, vpc/1, vpc/2, tgw/1, route/1: simulated leaves. vpc/2
//     requires a region and echoes it into status, so it is visible which
//     version ran; vpc's enable_flow_logs verb turns flow logs on.
//   - statussink/1: a reactor that uploads the rolled-up status of the
//     resource it watches to an S3-compatible store.
//
// Every kind but statussink has a finalizer: its teardown waits the delete
// delay and records the resource in a [TeardownLog], so the order of a
// cascade delete can be watched and checked. The leaves fail transiently at
// the configured fault rate; the composer and the reactor are never faulted,
// so the graph always builds and faults only slow it down.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// Options are the simulation knobs every simulated kind shares.
type Options struct {
	// FaultRate is the probability, 0..1, that a leaf's task fails
	// transiently (FAKE_FAULT_RATE).
	FaultRate float64
	// WorkDelay is the simulated time of a leaf's work (FAKE_WORK_DELAY).
	WorkDelay time.Duration
	// DeleteDelay is the simulated time of a teardown (FAKE_DELETE_DELAY).
	DeleteDelay time.Duration
	// Teardowns records every finished teardown; nil records nothing.
	Teardowns *TeardownLog
}

// New returns every provider of the classic demo.
func New(o Options) []webhooksdk.Provider {
	return []webhooksdk.Provider{
		leaf("account", 1, o, account),
		leaf("vpc", 1, o, vpc),
		leaf("vpc", 2, o, vpc),
		leaf("tgw", 1, o, tgw),
		leaf("route", 1, o, route),
		&bom{o: o},
		NewStatusSink(),
	}
}

// OptionsFromEnv reads FAKE_FAULT_RATE (0..1, default 0), FAKE_WORK_DELAY
// (default 0) and FAKE_DELETE_DELAY (default 0), durations like 500ms.
func OptionsFromEnv() (Options, error) {
	var o Options
	if v := os.Getenv("FAKE_FAULT_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r >= 0 && r <= 1) { // NaN fails both comparisons
			return o, fmt.Errorf("FAKE_FAULT_RATE=%q: want a probability in 0..1", v)
		}
		o.FaultRate = r
	}
	for _, d := range []struct {
		env  string
		into *time.Duration
	}{{"FAKE_WORK_DELAY", &o.WorkDelay}, {"FAKE_DELETE_DELAY", &o.DeleteDelay}} {
		v := os.Getenv(d.env)
		if v == "" {
			continue
		}
		t, err := time.ParseDuration(v)
		if err != nil || t < 0 {
			return o, fmt.Errorf("%s=%q: want a duration like 500ms", d.env, v)
		}
		*d.into = t
	}
	return o, nil
}

// errFault is the injected transient failure.
var errFault = errors.New("injected transient fault (FAKE_FAULT_RATE)")

// fault reports whether this task should fail, at rate.
func fault(rate float64) bool { return rate > 0 && rand.Float64() < rate }

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// teardown simulates deleting the real thing a resource stands for and
// records it. It succeeds however often it is delivered: a simulated thing
// is gone after the first.
func teardown(ctx context.Context, o Options, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	if err := sleep(ctx, o.DeleteDelay); err != nil {
		return webhooksdk.Outcome{}, err
	}
	o.Teardowns.add(req.Resource.Kind + "/" + req.Resource.Name)
	return webhooksdk.Outcome{}, nil
}

// TeardownLog is the order in which teardowns finished, as "kind/name". Safe
// for concurrent use; a nil log records nothing.
type TeardownLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *TeardownLog) add(entry string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, entry)
}

// Entries returns a copy of the log, oldest first. A teardown that was
// delivered again appears again.
func (l *TeardownLog) Entries() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.entries...)
}

// ServeHTTP answers with the log as a JSON array of "kind/name".
func (l *TeardownLog) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	entries := l.Entries()
	if entries == nil {
		entries = []string{} // an array, not null, before the first teardown
	}
	_ = json.NewEncoder(w).Encode(entries)
}

func status(v any) (webhooksdk.Outcome, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("encode status: %w", err)
	}
	return webhooksdk.Outcome{Status: b}, nil
}

func decodeSpec(req webhooksdk.Request, into any) error {
	if err := json.Unmarshal(req.Resource.Spec, into); err != nil {
		return webhooksdk.Terminal(fmt.Errorf("decode %s spec: %w", req.Resource.Kind, err))
	}
	return nil
}

// simulatedID is a stable fake cloud id for name: prefix and 12 hex digits.
func simulatedID(prefix, name string) string {
	return prefix + "-" + fmt.Sprintf("%012x", hash(name))[:12]
}

// hash is FNV-1a, enough to derive stable simulated ids and CIDRs.
func hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// notFlowed is the terminal error for a dependent whose upstream value is
// missing: the engine runs a dependent only after its dependency synced, so
// the edge itself is missing and a retry cannot fix it.
func notFlowed(field string) error {
	return webhooksdk.Terminal(fmt.Errorf("spec.%s is empty: no value flowed into it and none was given", field))
}
