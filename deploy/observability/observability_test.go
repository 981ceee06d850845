// Package observability holds Converge's Grafana dashboard and Prometheus
// rules. Its tests parse them with Prometheus' own parsers and keep
// metrics.txt, the metrics they name, which the main module's
// TestObservabilityMetricsServed finds in a running converge's /metrics.
package observability

import (
	"encoding/json"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

var update = flag.Bool("update", false, "rewrite metrics.txt from the rules and the dashboard")

const (
	rulesFile     = "rules.yml"
	dashboardFile = "dashboard.json"
	metricsFile   = "metrics.txt"
)

// synthesized are the metrics Prometheus makes itself for each scrape
// target: no converge serves them.
var synthesized = []string{"up"}

// grafanaVariables stand in for the dashboard's variables and Grafana's
// own, so that its queries parse as the PromQL Grafana sends.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$job", ".+")

var promql = parser.NewParser(parser.Options{})

// TestRules parses rules.yml as Prometheus loads it (rulefmt: unknown
// fields, duplicate names, bad templates, and every expression through the
// PromQL parser), and checks what Prometheus leaves to taste: each alert
// has a severity and a summary, and each recording rule's name follows
// level:metric:operations.
func TestRules(t *testing.T) {
	groups := parseRules(t)
	recordName := regexp.MustCompile(`^converge:[a-z0-9_]+:[a-z0-9_]+$`)
	var alerts, records int
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			switch {
			case r.Alert != "":
				alerts++
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
					t.Errorf("alert %s: no severity label or no summary annotation", r.Alert)
				}
			case !recordName.MatchString(r.Record):
				t.Errorf("recording rule %s: want a name of the form converge:metric:operations", r.Record)
			default:
				records++
			}
		}
	}
	if alerts == 0 || records == 0 {
		t.Fatalf("%s holds %d alerts and %d recording rules; want some of each", rulesFile, alerts, records)
	}
}

// TestDashboard checks that every panel of dashboard.json queries the
// dashboard's data source with PromQL the parser accepts, that panel ids
// are unique, and that panels sit inside Grafana's 24-column grid.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d is used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v leaves the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: want queries on ${datasource}, got %q with %d queries", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, q := range p.Targets {
			if _, err := promql.ParseExpr(grafanaVariables.Replace(q.Expr)); err != nil {
				t.Errorf("panel %q, query %s: %v", p.Title, q.RefID, err)
			}
		}
	}
	if len(ids) < 10 {
		t.Fatalf("%s has %d panels; want the API, dispatch, queue, resources, endpoints, engine, pools and keys", dashboardFile, len(ids))
	}
}

// TestMetricsList keeps metrics.txt equal to the metrics the rules and the
// dashboard read, less the recording rules' own outputs and what
// Prometheus synthesizes (up). Run with -update after changing either.
func TestMetricsList(t *testing.T) {
	names := namedMetrics(t)
	if *update {
		if err := os.WriteFile(metricsFile, []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(metricsFile)
	if err != nil {
		t.Fatal(err)
	}
	listed := strings.Fields(string(b))
	if !slices.Equal(listed, names) {
		t.Fatalf("%s is stale: named but not listed %v, listed but not named %v; rewrite it with make test-observability UPDATE=1",
			metricsFile, without(names, listed), without(listed, names))
	}
}

// without returns the elements of a not in b.
func without(a, b []string) []string {
	return slices.DeleteFunc(slices.Clone(a), func(s string) bool { return slices.Contains(b, s) })
}

// namedMetrics returns, sorted, every metric a rule, a panel or a
// dashboard variable selects, less the recording rules' outputs and the
// synthesized metrics. A histogram's series appear as their _bucket, _sum
// or _count, as a scrape exposes them.
func namedMetrics(t *testing.T) []string {
	t.Helper()
	names := map[string]bool{}
	var recorded []string
	add := func(where, expr string) {
		e, err := promql.ParseExpr(expr)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				names[selectorName(t, where, vs)] = true
			}
			return nil
		})
	}
	for _, g := range parseRules(t).Groups {
		for _, r := range g.Rules {
			add(rulesFile+": "+r.Alert+r.Record, r.Expr)
			if r.Record != "" {
				recorded = append(recorded, r.Record)
			}
		}
	}
	d := readDashboard(t)
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			add(dashboardFile+": "+p.Title, grafanaVariables.Replace(q.Expr))
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			add(dashboardFile+": variable "+v.Name, labelValuesSelector(t, v.Definition))
		}
	}
	var out []string
	for n := range names {
		if !slices.Contains(recorded, n) && !slices.Contains(synthesized, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// selectorName is the metric a selector names, by name or by an equality
// matcher on __name__; a selector naming none (a regular expression on
// __name__) cannot be checked, so it fails the test.
func selectorName(t *testing.T, where string, vs *parser.VectorSelector) string {
	t.Helper()
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	t.Fatalf("%s: selector %s names no single metric", where, vs)
	return ""
}

// labelValuesSelector is the series selector of a Grafana
// label_values(selector, label) variable query.
func labelValuesSelector(t *testing.T, q string) string {
	t.Helper()
	m := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`).FindStringSubmatch(q)
	if m == nil {
		t.Fatalf("%s: variable query %q: want label_values(selector, label)", dashboardFile, q)
	}
	return grafanaVariables.Replace(m[1])
}

func parseRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promql, nil)
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return groups
}

// dashboard is the part of Grafana's dashboard model the tests read.
type dashboard struct {
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ X, Y, W, H int } `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}
