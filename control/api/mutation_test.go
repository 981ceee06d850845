package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/api/apitest"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/logbuf"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestMutation is the black-box mutation run (issue #14): a real API server
// on a real database, every route of its own OpenAPI document, a valid seed
// request per route, then MUTATE_N requests, each a seed with one to three
// mutations (byte flips, truncation, type swaps, dropped and extra fields,
// huge numbers and strings, bad UTF-8, deep nesting, wrong content types,
// garbage path and query parameters, wrong methods). It asserts no 5xx, no
// panic in the server log, every 4xx an RFC 9457 problem document, nothing
// written by a refused request (a fingerprint of every table: row count and
// a hash of the rows' xmin, before and after each request), and the heap
// flat (in use after a GC, at the end against after warm-up).
//
// The default suite sends 500 (a few seconds); MUTATE_N sets the number
// (`make mutate` sends 10,000; 0 skips the run); see docs/operations.md,
// "Fuzzing and mutation". MUTATE_SEED picks the random sequence (default
// 1), so a failure replays. Not parallel: the heap it measures is the test
// process's.
func TestMutation(t *testing.T) {
	n := 500
	if v := os.Getenv("MUTATE_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("MUTATE_N=%q: %v", v, err)
		}
	}
	if n <= 0 {
		t.Skip("MUTATE_N=0")
	}
	seed, _ := strconv.ParseUint(os.Getenv("MUTATE_SEED"), 10, 64)
	m := newMutator(t, max(seed, 1))
	m.restore()
	seeds := m.seeds()
	for _, s := range seeds {
		s.path = m.fill(s.tmpl)
		// A seed refused is still mutated, but reaches less of its route.
		switch r := m.send(s); {
		case r.err != nil || r.status >= 500:
			t.Fatalf("seed: %s", r.dump(s))
		case r.status >= 300:
			t.Logf("seed %s %s answered %d: %s", s.method, s.path, r.status, excerpt(r.body))
		}
		m.restore()
	}
	fp := m.fingerprint()
	warmAt := min(n/10, 500)
	var warm uint64
	var stats struct {
		sent, clientErr, s2xx, s4xx, s5xx, refusedWrote, notProblem int
		byMutation                                                  map[string]int
	}
	stats.byMutation = map[string]int{}
	begin := time.Now()
	for i := range n {
		if i == warmAt {
			warm = heapInUse()
		}
		s := seeds[m.rnd.IntN(len(seeds))]
		s.path = m.fill(s.tmpl) // the operation restore last created
		req, names := m.mutate(s)
		for _, name := range names {
			stats.byMutation[name]++
		}
		r := m.send(req)
		if r.err != nil {
			stats.clientErr++ // the client refused to send it (e.g. a control byte in the path)
			continue
		}
		stats.sent++
		after := m.fingerprint()
		switch {
		case r.status >= 500:
			stats.s5xx++
			m.failf("%d answer to %s", r.status, r.dump(req))
		case r.status >= 400:
			stats.s4xx++
			if why := notProblem(r); why != "" {
				stats.notProblem++
				m.failf("%d answer is not a problem document (%s) to %s", r.status, why, r.dump(req))
			}
			if after != fp {
				stats.refusedWrote++
				m.failf("a refused (%d) request wrote to the database:\n before %s\n after  %s\n%s", r.status, fp, after, r.dump(req))
			}
		default:
			stats.s2xx++
			if req.method != http.MethodGet {
				m.restore()
				after = m.fingerprint()
			}
		}
		fp = after
	}
	took := time.Since(begin)
	end := heapInUse()
	if m.panicked() {
		t.Errorf("the server log records a panic:\n%s", m.logs.String())
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range stats.byMutation {
			if !yield(k) {
				return
			}
		}
	})
	var by []string
	for _, k := range names {
		by = append(by, fmt.Sprintf("%s %d", k, stats.byMutation[k]))
	}
	t.Logf("mutation run: %d requests sent (%d more refused by the client) over %d routes in %s: %d 2xx, %d 4xx, %d 5xx; "+
		"%d refused requests wrote to the database; %d 4xx answers not problem documents; heap in use %.1f MiB after warm-up, %.1f MiB at the end",
		stats.sent, stats.clientErr, len(seeds), took.Round(time.Millisecond), stats.s2xx, stats.s4xx, stats.s5xx,
		stats.refusedWrote, stats.notProblem, mib(warm), mib(end))
	t.Logf("mutations applied: %s", strings.Join(by, ", "))
	// The heap holds the kind cache, the OpenAPI document and pools that
	// grow to their working size during warm-up; after that it must stay.
	if warm > 0 && float64(end) > 1.5*float64(warm)+8<<20 {
		t.Errorf("heap in use grew from %.1f MiB after warm-up to %.1f MiB", mib(warm), mib(end))
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// mutator holds the server under test and the random source.
type mutator struct {
	t      *testing.T
	db     *pgtest.Database
	base   string
	client *http.Client
	rnd    *rand.Rand
	logs   *logbuf.Buffer
	tables string // the fingerprint query
	opID   string // the operation the {id} routes name
	// deliveryID is the delivery the replay route's {id} names, once
	// TestDryRun has recorded one.
	deliveryID string
	// sent counts the test deliveries the stub answered.
	sent  atomic.Int64
	fails int
}

func (m *mutator) panicked() bool { return strings.Contains(m.logs.String(), "panic") }

// failf reports a failure, the first 20 in full.
func (m *mutator) failf(format string, args ...any) {
	m.t.Helper()
	m.fails++
	if m.fails <= 20 {
		m.t.Errorf(format, args...)
	} else {
		m.t.Fail()
	}
}

func newMutator(t *testing.T, seed uint64) *mutator {
	t.Helper()
	db := pgtest.New(t)
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st := store.New(db.Pool, store.Config{})
	kinds := store.NewKindCache(st, store.KindCacheConfig{}, log)
	if err := kinds.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kinds.Stop)
	box, err := store.NewSecretBox(bytes.Repeat([]byte{7}, store.SecretKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	// A small body limit keeps the huge-value mutations quick while still
	// crossing it.
	// No dispatcher runs here: a test delivery's round trip is a stub's, so
	// that its route answers rather than refusing with 503.
	var sent *atomic.Int64 // the mutator's, once made
	test := func(_ context.Context, name string) (api.EndpointTest, error) {
		sent.Add(1)
		return api.EndpointTest{Endpoint: name, At: time.Now(), Classification: "network", Excerpt: "refused: no provider here"}, nil
	}
	srv, err := api.New(api.Config{BodyLimit: 256 << 10, BatchMaxItems: 50,
		Endpoints: &api.EndpointsConfig{Box: box, ValidateURL: func(string) error { return nil }, Test: test}}, st, kinds, log)
	if err != nil {
		t.Fatal(err)
	}
	m := &mutator{t: t, db: db, base: apitest.Serve(t, srv), logs: logs, rnd: rand.New(rand.NewPCG(seed, 14)),
		client: &http.Client{Timeout: time.Minute}}
	sent = &m.sent
	t.Cleanup(m.client.CloseIdleConnections)
	var parts []string
	rows, err := db.Pool.Query(t.Context(), `SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
		WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, fmt.Sprintf(`(SELECT '%s=' || count(*) || ':' || coalesce(sum(hashtext(xmin::text)::bigint), 0) FROM %s)`,
			strings.ReplaceAll(name, "'", "''"), name))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	m.tables = "SELECT concat_ws(' ', " + strings.Join(parts, ", ") + ")"
	return m
}

// fingerprint is every table's row count and a hash of its rows' xmin:
// any insert, update or delete changes it.
func (m *mutator) fingerprint() string {
	m.t.Helper()
	var fp string
	if err := m.db.Pool.QueryRow(context.Background(), m.tables).Scan(&fp); err != nil {
		m.t.Fatal(err)
	}
	return fp
}

// request is one request to send.
type request struct {
	method, path, query, contentType string
	body                             []byte
	tmpl                             string // the OpenAPI path, for fill
}

type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func (a answer) dump(r request) string {
	return fmt.Sprintf("%s %s?%s (Content-Type %q)\n%s\n=> %d %s", r.method, r.path, r.query, r.contentType,
		excerpt(r.body), a.status, excerpt(a.body))
}

func excerpt(b []byte) string {
	if len(b) > 400 {
		return fmt.Sprintf("%q… (%d bytes)", b[:400], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func (m *mutator) send(r request) answer {
	m.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), r.method, m.base, bytes.NewReader(r.body))
	if err != nil {
		return answer{err: err}
	}
	// Opaque carries the path as is: percent-escapes, invalid ones
	// included, reach the server unchanged.
	req.URL.Opaque = "//" + req.URL.Host + r.path
	req.URL.RawQuery = r.query
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		m.t.Fatalf("%s %s: read answer: %v", r.method, r.path, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: body}
}

// notProblem says why a 4xx answer is not an RFC 9457 problem document the
// API documents (docs/api.md, Errors), or "".
func notProblem(a answer) string {
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		return "Content-Type " + ct
	}
	var p struct {
		Type, Title, Detail *string
		Status              *int
		Errors              *[]json.RawMessage
	}
	if err := json.Unmarshal(a.body, &p); err != nil {
		return "not JSON: " + err.Error()
	}
	switch {
	case p.Type == nil || *p.Type == "" || p.Title == nil || p.Detail == nil || p.Errors == nil:
		return "a member is missing"
	case p.Status == nil || *p.Status != a.status:
		return "status member is not the HTTP status"
	}
	return ""
}

const (
	boxManifest = `{"kind":"box","kind_version":1,"description":"a box",
	  "spec_schema":{"type":"object","properties":{"n":{"type":"integer","minimum":0},"tag":{"type":"string","pattern":"^[a-z]*$"}}},
	  "config_schema":{"type":"object","properties":{"region":{"type":"string"}}},
	  "reactions":[{"name":"work","trigger":"specChange","emits":["status"]},
	    {"name":"snap","trigger":"operation","verb":"snapshot","emits":["operationOutput"],
	     "input_schema":{"type":"object","properties":{"label":{"type":"string"}},"additionalProperties":false}}]}`
	sinkManifest = `{"kind":"sink","kind_version":1,"reactions":[{"name":"react","trigger":"reactor","emits":["sideEffect"]}]}`
	boxApply     = `{"kind":"box","kind_version":1,"name":"b1","labels":{"team":"a","tier":"x y"},"spec":{"n":1,"tag":"abc"}}`
	pcApply      = `{"name":"pc","kind":"box","kind_version":1,"spec":{"region":"eu"}}`
	bindApply    = `{"name":"bind","watch_kind":"box","transition":"failed","reactor":"sink","label_match":{"team":"a"}}`
	epApply      = `{"name":"ep","kinds":[{"kind":"box","kind_version":1}],"target":{"type":"https","url":"https://p.example/"},
	  "secret":"whsec_WlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlo="}`
	opApply   = `{"verb":"snapshot","input":{"label":"a"}}`
	sinkApply = `{"name":"alerts","sink_type":"sqs","target":"https://sqs.eu-west-1.amazonaws.com/123456789012/alerts","event_types":["resource.failed"],"kinds":["box"]}`
	nsApply   = `{"labels":{"owner":"a"},"max_objects":100,"max_in_flight":10}`
)

// restore puts back the objects the seeds name, after a request that
// succeeded may have changed or deleted them. Every write is an idempotent
// apply.
func (m *mutator) restore() {
	m.t.Helper()
	for _, w := range []request{
		{method: http.MethodPut, path: "/api/v1/kinds/box/manifest", body: []byte(boxManifest)},
		{method: http.MethodPut, path: "/api/v1/kinds/sink/manifest", body: []byte(sinkManifest)},
		{method: http.MethodPut, path: "/api/v1/namespaces/team", body: []byte(nsApply)},
		{method: http.MethodPost, path: "/api/v1/resources", body: []byte(boxApply)},
		{method: http.MethodPost, path: "/api/v1/resources/box/b1/unquarantine"},
		{method: http.MethodPost, path: "/api/v1/providerconfigs", body: []byte(pcApply)},
		{method: http.MethodPost, path: "/api/v1/reactor-bindings", body: []byte(bindApply)},
		{method: http.MethodPost, path: "/api/v1/endpoints", body: []byte(epApply)},
		{method: http.MethodPost, path: "/api/v1/alert-sinks", body: []byte(sinkApply)},
	} {
		if w.body != nil {
			w.contentType = "application/json"
		}
		r := m.send(w)
		switch {
		case r.err == nil && r.status < 300:
		case w.path == "/api/v1/resources/box/b1/unquarantine":
			// Refused when b1 is not quarantined: nothing to put back.
		case strings.HasSuffix(w.path, "/manifest") && r.status == http.StatusConflict && bytes.Contains(r.body, []byte("breaking-change")):
			// A mutated manifest the server accepted as an additive change
			// (a schema that admits more) cannot be narrowed back: that is
			// the breaking change the server refuses. The wider schema
			// still admits every seed, so it stays as the baseline.
		default:
			m.t.Fatalf("restore: %s", r.dump(w))
		}
	}
	if m.opID != "" {
		if r := m.send(request{method: http.MethodGet, path: "/api/v1/resources/box/b1/ops/" + m.opID}); r.status == http.StatusOK {
			return
		}
	}
	w := request{method: http.MethodPost, path: "/api/v1/resources/box/b1/ops", contentType: "application/json", body: []byte(opApply)}
	r := m.send(w)
	var op struct{ ID string }
	if r.err != nil || r.status != http.StatusAccepted || json.Unmarshal(r.body, &op) != nil {
		m.t.Fatalf("restore: %s", r.dump(w))
	}
	m.opID = op.ID
}

// seedBodies are the valid bodies of the routes that take one, by
// "METHOD path template".
var seedBodies = map[string]string{
	"PUT /api/v1/kinds/{kind}/manifest":                  boxManifest,
	"PUT /api/v1/kinds/{kind}/versions/{version}/config": `{"max_inflight":4,"task_deadline_secs":60,"resync_interval_secs":0,"resync_recomposes":false,"orphan_grace_secs":5,"max_transient_attempts":3}`,
	"POST /api/v1/resources":                             boxApply,
	"POST /api/v1/resources:batch":                       `{"items":[` + boxApply + `,{"kind":"box","kind_version":1,"name":"b2","spec":{"n":2}}]}`,
	"POST /api/v1/resources:reconcile":                   `{"since":"2020-01-01T00:00:00Z","label_selector":"team=a","limit":5}`,
	"POST /api/v1/providerconfigs":                       pcApply,
	"POST /api/v1/reactor-bindings":                      bindApply,
	"POST /api/v1/endpoints":                             epApply,
	"POST /api/v1/alert-sinks":                           sinkApply,
	"PUT /api/v1/namespaces/{name}":                      nsApply,
	"POST /api/v1/resources/{kind}/{name}/ops":           opApply,
	"POST /api/v1/resources/{kind}/{name}/rollback":      `{"revision":1}`,
}

// seedQueries are valid query strings, by "METHOD path template".
var seedQueries = map[string]string{
	"GET /api/v1/resources":        "kind=box&label_selector=team%3Da&limit=5&phase=Ready",
	"GET /api/v1/reactor-bindings": "watch_kind=box",
	"GET /api/v1/providerconfigs":  "kind=box",
}

// seeds reads the served OpenAPI document and builds one valid request per
// operation (method and path) in it.
func (m *mutator) seeds() []request {
	m.t.Helper()
	r := m.send(request{method: http.MethodGet, path: "/openapi.json"})
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &doc) != nil || len(doc.Paths) == 0 {
		m.t.Fatalf("the OpenAPI document: %s", excerpt(r.body))
	}
	var out []request
	for _, tmpl := range slices.Sorted(func(yield func(string) bool) {
		for p := range doc.Paths {
			if !yield(p) {
				return
			}
		}
	}) {
		for method := range doc.Paths[tmpl] {
			method = strings.ToUpper(method)
			if !slices.Contains([]string{"GET", "PUT", "POST", "DELETE", "PATCH"}, method) {
				continue
			}
			key := method + " " + tmpl
			body, hasBody := seedBodies[key]
			if !hasBody && method != http.MethodGet && method != http.MethodDelete {
				m.t.Logf("no seed body for %s: it is mutated from an empty one", key)
			}
			req := request{method: method, tmpl: tmpl, query: seedQueries[key], body: []byte(body)}
			if body != "" {
				req.contentType = "application/json"
			}
			out = append(out, req)
		}
	}
	// DELETEs last, so each seed finds what it names.
	slices.SortStableFunc(out, func(a, b request) int {
		return boolInt(a.method == http.MethodDelete) - boolInt(b.method == http.MethodDelete)
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fill puts the seed objects' names in a path template.
func (m *mutator) fill(tmpl string) string {
	name := "b1"
	switch {
	case strings.Contains(tmpl, "/providerconfigs/"):
		name = "pc"
	case strings.Contains(tmpl, "/endpoints/"):
		name = "ep"
	case strings.Contains(tmpl, "/reactor-bindings/"):
		name = "bind"
	case strings.Contains(tmpl, "/alert-sinks/"):
		name = "alerts"
	case strings.Contains(tmpl, "/namespaces/"):
		name = "team"
	}
	id := m.opID
	if m.deliveryID != "" && strings.HasPrefix(tmpl, "/api/v1/deliveries/") {
		id = m.deliveryID
	}
	return strings.NewReplacer("{kind}", "box", "{version}", "1", "{name}", name, "{id}", id).Replace(tmpl)
}

// mutate returns s with one to three mutations and their names.
func (m *mutator) mutate(s request) (request, []string) {
	r := s
	r.body = bytes.Clone(s.body)
	var names []string
	for range 1 + m.rnd.IntN(3) {
		name, fn := m.pick()
		fn(&r)
		names = append(names, name)
	}
	return r, names
}

type mutation struct {
	name   string
	weight int
	fn     func(m *mutator, r *request)
}

var mutations = []mutation{
	{"byte-flip", 3, func(m *mutator, r *request) {
		if len(r.body) == 0 {
			r.body = []byte{byte(m.rnd.IntN(256))}
			return
		}
		for range 1 + m.rnd.IntN(4) {
			r.body[m.rnd.IntN(len(r.body))] ^= byte(1 + m.rnd.IntN(255))
		}
	}},
	{"truncate", 2, func(m *mutator, r *request) {
		if len(r.body) > 0 {
			r.body = r.body[:m.rnd.IntN(len(r.body))]
		}
	}},
	{"type-swap", 3, func(m *mutator, r *request) {
		m.editJSON(r, func(s *slot) { s.set(m.value()) })
	}},
	{"drop-field", 2, func(m *mutator, r *request) {
		m.editJSON(r, func(s *slot) {
			if s.del != nil {
				s.del()
			}
		})
	}},
	{"extra-field", 2, func(m *mutator, r *request) {
		m.editJSON(r, func(s *slot) {
			if obj, ok := s.get().(map[string]any); ok {
				obj[[]string{"extra", "", "kindVersion", "ü", "id", "__proto__", strings.Repeat("k", 300)}[m.rnd.IntN(7)]] = m.value()
			} else {
				s.set(map[string]any{"extra": m.value()})
			}
		})
	}},
	{"duplicate-key", 1, func(m *mutator, r *request) {
		if i := bytes.IndexByte(r.body, '{'); i >= 0 {
			r.body = slices.Concat(r.body[:i+1], []byte(`"kind":"box","kind":"box",`), r.body[i+1:])
		}
	}},
	{"huge-value", 2, func(m *mutator, r *request) {
		huge := []any{json.Number("1e400"), json.Number("-1e400"), json.Number("123456789012345678901234567890"),
			json.Number("9223372036854775808"), json.Number("-9223372036854775809"), json.Number("0.0000000000000000000001"),
			strings.Repeat("x", 1<<(10+m.rnd.IntN(9))), strings.Repeat("é", 70000)}
		m.editJSON(r, func(s *slot) { s.set(huge[m.rnd.IntN(len(huge))]) })
	}},
	{"bad-text", 2, func(m *mutator, r *request) {
		bad := []string{"\xff\xfe", `\ud800`, `\u0000`, `a\udc00b`, "\xc3\x28", "\xed\xa0\x80", `\uDFFF\uD800`}
		m.editRaw(r, `"`+bad[m.rnd.IntN(len(bad))]+`"`)
	}},
	{"deep-nesting", 1, func(m *mutator, r *request) {
		d := []int{64, 1000, 10001, 100000}[m.rnd.IntN(4)]
		open, close := "[", "]"
		if m.rnd.IntN(2) == 0 {
			open, close = `{"a":`, "}"
		}
		m.editRaw(r, strings.Repeat(open, d)+"1"+strings.Repeat(close, d))
	}},
	{"content-type", 2, func(m *mutator, r *request) {
		r.contentType = []string{"text/plain", "application/xml", "", "application/json; charset=latin1", "application/x-ndjson",
			"multipart/form-data; boundary=x", "application/problem+json", "garbage///", "application/json;;;", "*/*"}[m.rnd.IntN(10)]
	}},
	{"path-param", 2, func(m *mutator, r *request) {
		segs := strings.Split(r.path, "/")
		i := 1 + m.rnd.IntN(len(segs)-1)
		segs[i] = []string{"", "%00", "%ff", "%zz", "..", ".", "%2e%2e", "%2F", strings.Repeat("a", 300), strings.Repeat("%c3%a9", 200),
			"0", "-1", "99999999999999999999", "1.5", "32768", "Box", "b%201", "00000000-0000-0000-0000-000000000000", "not-a-uuid",
			"\xff", "ü", "{kind}", "%%", ";", "a;b=c"}[m.rnd.IntN(25)]
		r.path = strings.Join(segs, "/")
	}},
	{"extra-segment", 1, func(m *mutator, r *request) {
		r.path += []string{"/", "/x", "//", "/..", "/%00", ":batch", ";x"}[m.rnd.IntN(7)]
	}},
	{"query", 3, func(m *mutator, r *request) {
		names := []string{"limit", "cursor", "label_selector", "phase", "owner", "kind", "watch_kind", "before", "kinnd", "", "%00", "%ff", "a%3Db"}
		values := []string{"-1", "0", "1e99", "abc", "99999999999999999999", "%00", "%ff", "%zz", "%", strings.Repeat("v", 5000),
			"AAAA", "bm90IGEgY3Vyc29y", "MTcwMDAwMDAwMDAwMDAwMDAwLjA", "a=b,c", "=", ",,,", "%0A", "%09", "Ready", "Bogus", "ü"}
		q := names[m.rnd.IntN(len(names))] + "=" + values[m.rnd.IntN(len(values))]
		if r.query != "" && m.rnd.IntN(2) == 0 {
			q = r.query + "&" + q
		}
		r.query = q
	}},
	{"method", 2, func(m *mutator, r *request) {
		others := slices.DeleteFunc([]string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "PROPFIND", "get"},
			func(s string) bool { return s == r.method })
		r.method = others[m.rnd.IntN(len(others))]
	}},
}

func (m *mutator) pick() (string, func(*request)) {
	total := 0
	for _, mu := range mutations {
		total += mu.weight
	}
	k := m.rnd.IntN(total)
	for _, mu := range mutations {
		if k < mu.weight {
			return mu.name, func(r *request) { mu.fn(m, r) }
		}
		k -= mu.weight
	}
	panic("unreachable")
}

// value is a JSON value of a random type.
func (m *mutator) value() any {
	vs := []any{nil, true, false, json.Number("0"), json.Number("-1"), json.Number("1.5"), json.Number("32767"), json.Number("32768"),
		"", "x", "box", []any{}, []any{json.Number("1"), "a"}, map[string]any{}, map[string]any{"a": nil}}
	return vs[m.rnd.IntN(len(vs))]
}

// slot is a place in a JSON document: the root, an object member or an
// array element.
type slot struct {
	get func() any
	set func(any)
	del func() // nil for the root and array elements
}

func collect(v any, s slot, out *[]slot) {
	*out = append(*out, s)
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) { // sorted: the seeded run replays
			child := x[k]
			collect(child, slot{get: func() any { return x[k] }, set: func(n any) { x[k] = n }, del: func() { delete(x, k) }}, out)
		}
	case []any:
		for i, child := range x {
			collect(child, slot{get: func() any { return x[i] }, set: func(n any) { x[i] = n }}, out)
		}
	}
}

// editJSON edits one random place of the body as JSON; a body that is not
// JSON (already mutated, or none) is replaced by an object to edit.
func (m *mutator) editJSON(r *request, edit func(*slot)) {
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	var root any
	if dec.Decode(&root) != nil {
		root = map[string]any{}
	}
	var slots []slot
	collect(root, slot{get: func() any { return root }, set: func(n any) { root = n }}, &slots)
	edit(&slots[m.rnd.IntN(len(slots))])
	b, err := json.Marshal(root)
	if err != nil {
		m.t.Fatalf("encode a mutated body: %v", err)
	}
	r.body = b
}

// editRaw puts raw JSON text (which json.Marshal would escape or refuse)
// at one random place of the body.
func (m *mutator) editRaw(r *request, raw string) {
	const marker = "\x01mutation\x01"
	m.editJSON(r, func(s *slot) { s.set(marker) })
	enc, _ := json.Marshal(marker)
	r.body = bytes.Replace(r.body, enc, []byte(raw), 1)
}

// TestUnknownMethodIsProblem: a method outside Fiber's list, which the
// mutation run found answered in plain text, is a problem document too.
func TestUnknownMethodIsProblem(t *testing.T) {
	t.Parallel()
	m := newMutator(t, 1)
	for _, method := range []string{"PROPFIND", "get", "BREW"} {
		r := m.send(request{method: method, path: "/api/v1/resources"})
		if r.err != nil || r.status != http.StatusBadRequest || notProblem(r) != "" {
			t.Errorf("%s: %d %s (%v): %s", method, r.status, notProblem(r), r.err, excerpt(r.body))
		}
	}
}
