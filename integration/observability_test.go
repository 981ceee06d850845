package integration

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/keyrotation"
	"github.com/convergeplane/converge/internal/testkit/awstest"
	"github.com/convergeplane/converge/webhooksdk"
)

// observedMetrics is the list of metrics deploy/observability's rules and
// dashboard read, which its own test (make test-observability) keeps
// equal to what they name.
const observedMetrics = "../deploy/observability/metrics.txt"

// holdProvider serves kind "hold" and answers nothing until release is
// closed: its tasks stay claimed.
type holdProvider struct{ release chan struct{} }

func (p *holdProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "hold", Version: 1}
}
func (p *holdProvider) Ready() bool { return true }
func (p *holdProvider) Work(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
	select {
	case <-p.release:
	case <-ctx.Done():
	}
	return webhooksdk.Outcome{Status: json.RawMessage(`{}`)}, nil
}

// TestObservabilityMetricsServed runs the product as the AWS deployment
// configures it (a read replica URL, the keys in Secrets Manager, on
// moto_server) and drives work through every state the dashboard shows:
// tasks parked on an unready provider (pending, with an age), tasks held
// by a provider (claimed), deliveries, completions and resources counted
// by phase. Every metric deploy/observability's rules and dashboard name
// must appear in its /metrics over the run: a rule or a panel reading a
// metric converge does not serve would show nothing, or never fire.
func TestObservabilityMetricsServed(t *testing.T) {
	awstest.Start(t) // sets the environment: not parallel
	want := readObservedMetrics(t)
	ctx := t.Context()
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	must(t, err)
	sm := secretsmanager.NewFromConfig(awsCfg)
	secret := func(name string, n int) string {
		out, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name),
			SecretString: aws.String(base64.StdEncoding.EncodeToString(make([]byte, n)))})
		must(t, err)
		return *out.ARN
	}
	secretARN, callbackARN := secret("converge/secret-key", keyrotation.SecretKeyBytes), secret("converge/callback-key", keyrotation.CallbackKeyBytes)
	s := startAllWith(t, func(c *convergecli.Config) {
		c.DatabaseReadURL = c.DatabaseURL
		c.SecretKey, c.CallbackKey, c.SecretKeyARN, c.CallbackKeyARN = nil, nil, secretARN, callbackARN
		c.KeyRefreshInterval = 100 * time.Millisecond
		c.PhaseCountInterval = 100 * time.Millisecond
	})
	for _, kind := range []string{"echo", "hold"} {
		if code, body := s.call("PUT", "/kinds/"+kind+"/manifest", map[string]any{"kind": kind, "kind_version": 1,
			"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
			t.Fatalf("%s manifest = %d %s", kind, code, body)
		}
	}
	echo, hold := &echoProvider{}, &holdProvider{release: make(chan struct{})}
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hold.release) }) }) // before the server stops
	s.serveProvider("echo", echo)
	s.serveProvider("hold", hold)
	for _, r := range []struct{ kind, name string }{{"echo", "e1"}, {"echo", "e2"}, {"hold", "h1"}} {
		if code, body := s.call("POST", "/resources", map[string]any{"kind": r.kind, "kind_version": 1, "name": r.name, "spec": map[string]any{}}); code != 201 {
			t.Fatalf("apply %s/%s = %d %s", r.kind, r.name, code, body)
		}
	}

	// Scrape until every metric has been seen: echo's tasks park (pending)
	// until its provider turns ready, hold's stay claimed.
	seen := map[string]bool{}
	missing := want
	deadline := time.Now().Add(60 * time.Second)
	for len(missing) > 0 && time.Now().Before(deadline) {
		for _, n := range scrapeNames(t, s.base) {
			seen[n] = true
		}
		if seen["converge_dispatch_oldest_pending_seconds"] {
			echo.ready.Store(true)
		}
		missing = slices.DeleteFunc(slices.Clone(want), func(n string) bool { return seen[n] })
		time.Sleep(100 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Fatalf("deploy/observability names metrics a running converge never served: %v", missing)
	}
	release.Do(func() { close(hold.release) })
	waitFor(t, 30*time.Second, "hold/h1 Ready", func() bool {
		var d struct{ Phase string }
		_, body := s.call("GET", "/resources/hold/h1", nil)
		return json.Unmarshal(body, &d) == nil && d.Phase == string(model.PhaseReady)
	})
}

// readObservedMetrics reads metrics.txt: one metric name a line.
func readObservedMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(observedMetrics)
	must(t, err)
	names := strings.Fields(string(b))
	if len(names) == 0 {
		t.Fatalf("%s lists no metric", observedMetrics)
	}
	return names
}

// scrapeNames returns the sample names of one scrape of /metrics, as the
// exposition writes them (a histogram's as _bucket, _sum and _count).
func scrapeNames(t *testing.T, base string) []string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	must(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics = %d", resp.StatusCode)
	}
	var names []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names = append(names, line[:i])
		}
	}
	must(t, sc.Err())
	return names
}
