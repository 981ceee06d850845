package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

func TestNew(t *testing.T) {
	t.Parallel()
	var got []string
	for _, p := range New(Options{}) {
		got = append(got, p.Kind().String())
	}
	want := []string{"account/v1", "vpc/v1", "vpc/v2", "tgw/v1", "route/v1", "classicbom/v1", "statussink/v1"}
	if !slices.Equal(got, want) {
		t.Errorf("New serves %v, want %v", got, want)
	}
	// The Handler refuses duplicate or invalid kinds, so New's set must build one.
	secret := "whsec_" + strings.Repeat("A", 32)
	h, err := webhooksdk.Handler(New(Options{}), webhooksdk.WithSecrets(secret))
	if err != nil {
		t.Fatalf("webhooksdk.Handler(New(...)): %v", err)
	}
	// Every kind is ready from the start: statussink until a config names a store it
	// cannot reach, the others always.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, sdktest.NewHealthRequest(t, secret))
	var health webhooksdk.HealthResponse
	if err := json.Unmarshal(w.Body.Bytes(), &health); err != nil || len(health.Kinds) != len(want) {
		t.Fatalf("health probe: %d %s", w.Code, w.Body)
	}
	for _, k := range health.Kinds {
		if !k.Ready {
			t.Errorf("%s/%d is not ready", k.Kind, k.KindVersion)
		}
	}
}

// TestOptionsFromEnv sets the process environment, so it and its subtests
// do not run in parallel.
func TestOptionsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name            string
		rate, work, del string
		want            Options
		wantErr         string // the variable the error must name
	}{
		{name: "unset"},
		{name: "all set", rate: "0.25", work: "200ms", del: "2s",
			want: Options{FaultRate: 0.25, WorkDelay: 200 * time.Millisecond, DeleteDelay: 2 * time.Second}},
		{name: "rate 0", rate: "0", want: Options{}},
		{name: "rate 1", rate: "1", want: Options{FaultRate: 1}},
		{name: "zero durations", work: "0", del: "0s"},
		{name: "minutes", del: "1m30s", want: Options{DeleteDelay: 90 * time.Second}},
		{name: "rate above 1", rate: "1.5", wantErr: "FAKE_FAULT_RATE"},
		{name: "rate below 0", rate: "-0.1", wantErr: "FAKE_FAULT_RATE"},
		{name: "rate not a number", rate: "x", wantErr: "FAKE_FAULT_RATE"},
		{name: "rate percent", rate: "25%", wantErr: "FAKE_FAULT_RATE"},
		{name: "rate infinite", rate: "Inf", wantErr: "FAKE_FAULT_RATE"},
		{name: "rate NaN", rate: "NaN", wantErr: "FAKE_FAULT_RATE"},
		{name: "work delay invalid", work: "soon", wantErr: "FAKE_WORK_DELAY"},
		{name: "work delay no unit", work: "500", wantErr: "FAKE_WORK_DELAY"},
		{name: "work delay negative", work: "-1s", wantErr: "FAKE_WORK_DELAY"},
		{name: "delete delay invalid", del: "x", wantErr: "FAKE_DELETE_DELAY"},
		{name: "delete delay negative", del: "-5ms", wantErr: "FAKE_DELETE_DELAY"},
		{name: "bad delete delay after a good rate", rate: "0.5", work: "1s", del: "1d", wantErr: "FAKE_DELETE_DELAY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FAKE_FAULT_RATE", tc.rate)
			t.Setenv("FAKE_WORK_DELAY", tc.work)
			t.Setenv("FAKE_DELETE_DELAY", tc.del)
			got, err := OptionsFromEnv()
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("OptionsFromEnv() = %+v, want an error naming %s", got, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("OptionsFromEnv() error %q does not name %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("OptionsFromEnv(): %v", err)
			}
			if got != tc.want {
				t.Errorf("OptionsFromEnv() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestTeardownLog(t *testing.T) {
	t.Parallel()
	l := &TeardownLog{}
	if got := l.Entries(); len(got) != 0 {
		t.Errorf("a new log has entries %q", got)
	}
	for _, e := range []string{"route/a", "vpc/a", "route/a"} {
		l.add(e)
	}
	got := l.Entries()
	if want := []string{"route/a", "vpc/a", "route/a"}; !slices.Equal(got, want) {
		t.Fatalf("Entries() = %q, want %q (in order, redeliveries repeated)", got, want)
	}
	// Entries is a copy: changing it, or adding after it, leaves the other alone.
	got[0] = "changed"
	l.add("account/a")
	if again := l.Entries(); !slices.Equal(again, []string{"route/a", "vpc/a", "route/a", "account/a"}) {
		t.Errorf("Entries() after changing an earlier copy = %q", again)
	}
	if got[0] != "changed" || len(got) != 3 {
		t.Errorf("a returned copy changed under the caller: %q", got)
	}

	var nilLog *TeardownLog
	nilLog.add("vpc/x") // must not panic
}

func TestTeardownLogConcurrent(t *testing.T) {
	t.Parallel()
	l := &TeardownLog{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				l.add(fmt.Sprintf("vpc/%d-%d", g, i))
				_ = l.Entries()
			}
		})
	}
	wg.Wait()
	got := l.Entries()
	if len(got) != 800 {
		t.Fatalf("%d entries after 800 concurrent adds", len(got))
	}
	slices.Sort(got)
	if len(slices.Compact(got)) != 800 {
		t.Error("concurrent adds lost or duplicated entries")
	}
}

func TestTeardownLogServeHTTP(t *testing.T) {
	t.Parallel()
	l := &TeardownLog{}
	get := func() (string, []string) {
		t.Helper()
		w := httptest.NewRecorder()
		l.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/debug/teardowns", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("status %d", w.Code)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", ct)
		}
		body := strings.TrimSpace(w.Body.String())
		var entries []string
		if err := json.Unmarshal([]byte(body), &entries); err != nil {
			t.Fatalf("body %q is not a JSON array of strings: %v", body, err)
		}
		return body, entries
	}
	// Documented as a JSON array, also before the first teardown.
	if body, _ := get(); body != "[]" {
		t.Errorf("empty log serves %s, want []", body)
	}
	l.add("route/classic-a-x")
	l.add("classicbom/classic")
	if _, entries := get(); !slices.Equal(entries, []string{"route/classic-a-x", "classicbom/classic"}) {
		t.Errorf("log serves %q", entries)
	}
}

// TestHash pins hash to FNV-1a 64: the simulated ids and CIDRs derive from it,
// so a change would rename every simulated cloud id.
func TestHash(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "a", "classic-payments-checkout", "vpc-1/tgw-1", strings.Repeat("x", 300), "ünïcode"} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if got, want := hash(s), h.Sum64(); got != want {
			t.Errorf("hash(%q) = %#x, want FNV-1a %#x", s, got, want)
		}
	}
}

func TestSimulatedID(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, name := range []string{"", "a", "b", "classic-payments", "classic-identity"} {
		id := simulatedID("tgw", name)
		if !strings.HasPrefix(id, "tgw-") || !hexID.MatchString(strings.TrimPrefix(id, "tgw-")) {
			t.Errorf("simulatedID(tgw, %q) = %q, want tgw- and 12 hex digits", name, id)
		}
		if id != simulatedID("tgw", name) {
			t.Errorf("simulatedID(tgw, %q) is not stable", name)
		}
		if other, ok := seen[id]; ok {
			t.Errorf("%q and %q share id %s", other, name, id)
		}
		seen[id] = name
	}
	if got, want := simulatedID("vpc", "a"), fmt.Sprintf("vpc-%012x", hash("a"))[:16]; got != want {
		t.Errorf("simulatedID(vpc, a) = %q, want %q", got, want)
	}
}

func TestCIDR(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "classic-payments-checkout", "classic-analytics-etl"} {
		c := cidr(name)
		if !cidrPattern.MatchString(c) || !strings.HasPrefix(c, "10.") || !strings.HasSuffix(c, ".0/24") {
			t.Errorf("cidr(%q) = %q, want a /24 in 10.0.0.0/8", name, c)
		}
		if c != cidr(name) {
			t.Errorf("cidr(%q) is not stable", name)
		}
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	// No delay: no wait, even with a done context.
	if err := sleep(ctx, 0); err != nil {
		t.Errorf("sleep(done, 0) = %v, want nil", err)
	}
	if err := sleep(ctx, -time.Second); err != nil {
		t.Errorf("sleep(done, -1s) = %v, want nil", err)
	}
	if err := sleep(ctx, time.Hour); err != context.Canceled {
		t.Errorf("sleep(done, 1h) = %v, want context.Canceled", err)
	}
	if err := sleep(t.Context(), time.Millisecond); err != nil {
		t.Errorf("sleep(ctx, 1ms) = %v", err)
	}
}

func TestStatusAndDecodeSpec(t *testing.T) {
	t.Parallel()
	out, err := status(map[string]any{"a": 1})
	if err != nil || string(out.Status) != `{"a":1}` {
		t.Errorf("status = %s, %v", out.Status, err)
	}
	if _, err := status(make(chan int)); err == nil || webhooksdk.IsTerminal(err) {
		t.Errorf("status(chan) = %v, want a transient encode error", err)
	}
	var into accountSpec
	req := webhooksdk.Request{Resource: webhooksdk.Resource{Kind: "account", Spec: json.RawMessage(`[1]`)}}
	if err := decodeSpec(req, &into); !webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), "decode account spec") {
		t.Errorf("decodeSpec of a bad spec = %v, want a terminal error naming the kind", err)
	}
	if err := notFlowed("vpc_id"); !webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), "spec.vpc_id") {
		t.Errorf("notFlowed = %v", err)
	}
}
