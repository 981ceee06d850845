package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// dryRunCase is one request of TestDryRun: sent with ?dry_run=true, then
// without, on the same state.
type dryRunCase struct {
	name  string
	req   request
	valid bool // the real request succeeds (2xx); else it is refused (4xx)
	// setup are requests sent first, each answered 2xx.
	setup []request
}

// loneManifest is a kind no seed object uses: deleting it succeeds.
const loneManifest = `{"kind":"lone","kind_version":1,"reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`

// dryRunOwn are the valid requests of the routes whose seed is refused
// (DELETE of the box manifest, which b1 uses, is a refusal worth keeping),
// with what they need first.
var dryRunOwn = map[string]dryRunCase{
	"DELETE /api/v1/kinds/{kind}/versions/{version}/manifest": {name: "unused kind", req: request{tmpl: "/api/v1/kinds/lone/versions/1/manifest"},
		valid: true, setup: []request{{method: http.MethodPut, path: "/api/v1/kinds/lone/manifest", body: []byte(loneManifest)}}},
}

// dryRunRefusals are the refused requests TestDryRun sends beside each
// route's own (its seed with the names in its path missing): the
// validations a dry run must run as a real write does.
var dryRunRefusals = map[string][]dryRunCase{
	"PUT /api/v1/kinds/{kind}/manifest": {
		{name: "breaking schema change", req: request{body: []byte(strings.Replace(boxManifest, `"minimum":0`, `"minimum":5`, 1))}},
		{name: "kind mismatch", req: request{body: []byte(sinkManifest)}},
	},
	"POST /api/v1/resources": {
		{name: "spec against its schema", req: request{body: []byte(`{"kind":"box","kind_version":1,"name":"b9","spec":{"n":-1}}`)}},
		{name: "missing provider config", req: request{body: []byte(`{"kind":"box","kind_version":1,"name":"b9","provider_config_ref":"nope"}`)}},
		{name: "reactor kind", req: request{body: []byte(`{"kind":"sink","kind_version":1,"name":"b9"}`)}},
	},
	"POST /api/v1/providerconfigs": {
		{name: "spec against the config schema", req: request{body: []byte(`{"name":"pc2","kind":"box","kind_version":1,"spec":{"region":5}}`)}},
	},
	"POST /api/v1/endpoints": {
		{name: "bad secret", req: request{body: []byte(`{"name":"ep2","kinds":[{"kind":"box","kind_version":1}],"target":{"type":"https","url":"https://p.example/"},"secret":"whsec_x"}`)}},
	},
	"POST /api/v1/resources:batch": {
		{name: "empty", req: request{body: []byte(`{"items":[]}`)}},
	},
	"PUT /api/v1/namespaces/{name}": {
		{name: "negative quota", req: request{body: []byte(`{"max_objects":-1}`)}},
	},
	"POST /api/v1/alert-sinks": {
		{name: "unknown event type", req: request{body: []byte(`{"name":"pager","sink_type":"sqs","target":"https://sqs.example/1/q","event_types":["exploded"]}`)}},
	},
}

// dryRunCreates are valid requests that create rather than re-apply a
// seed object, so that the dry run's answer is a creation's.
var dryRunCreates = map[string]string{
	"PUT /api/v1/kinds/{kind}/manifest": `{"kind":"box","kind_version":2,"spec_schema":{"type":"object"},"reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`,
	"POST /api/v1/resources":            `{"kind":"box","kind_version":1,"name":"b9","spec":{"n":9}}`,
	"POST /api/v1/resources:batch":      `{"items":[{"kind":"box","kind_version":1,"name":"b8","spec":{"n":8}},{"kind":"box","kind_version":1,"name":"b9","spec":{"n":9}}]}`,
	"POST /api/v1/providerconfigs":      `{"name":"pc2","kind":"box","kind_version":1,"spec":{"region":"us"}}`,
	"POST /api/v1/reactor-bindings":     `{"name":"bind2","watch_kind":"box","transition":"failed","reactor":"sink"}`,
	"POST /api/v1/endpoints":            `{"name":"ep2","kinds":[{"kind":"box","kind_version":1}],"target":{"type":"https","url":"https://p.example/"}}`,
	"POST /api/v1/alert-sinks":          `{"name":"pager","sink_type":"sns","target":"arn:aws:sns:eu-west-1:123456789012:pager","event_types":["kind.parked"]}`,
}

// dryRunUpserts are the routes whose path names the object a PUT creates
// or updates: naming a missing one is a creation, not a refusal, so they
// have no "missing" case.
var dryRunUpserts = map[string]bool{"PUT /api/v1/namespaces/{name}": true}

// dryRunUnsent are the routes whose one effect is a request sent out, which
// no rollback takes back: their dry run checks the request, sends nothing
// and says so (classification not_sent), so only its status is the real
// call's.
var dryRunUnsent = map[string]bool{"/api/v1/endpoints/{name}/test-delivery": true}

// dryRunVolatile are the members of an answer that differ between two runs
// of one write: when it ran, and what a sequence or a random source gave it.
var dryRunVolatile = []string{"id", "created_at", "updated_at", "finished_at", "resource_version", "requested_at",
	"previous_valid_until", "secret_rotation_ends_at"}

// TestDryRun walks every write route (POST, PUT, PATCH, DELETE) of the
// served OpenAPI document and sends each of its requests twice on the same
// state: with ?dry_run=true, then for real. The dry run must answer what
// the real write answers (the same status, apply result and body, but for
// the members that differ between any two runs; for a refusal the same
// problem document), carry Dry-Run: true, and change nothing: every table
// (the event log, the work queue and outboxes, idempotency keys included)
// has the same rows before and after it. A route without a dry-run case
// fails the test: add one to dryRunCreates or dryRunRefusals, or let its
// seed (mutation_test.go) stand.
func TestDryRun(t *testing.T) {
	m := newMutator(t, 1)
	m.restore()
	routes := 0
	for _, seed := range m.seeds() {
		if seed.method == http.MethodGet {
			continue
		}
		routes++
		key := seed.method + " " + seed.tmpl
		cases := []dryRunCase{{name: "seed", req: seed, valid: true}}
		if own, ok := dryRunOwn[key]; ok {
			cases[0].valid = false
			own.req.method = seed.method
			cases = append(cases, own)
		}
		if body, ok := dryRunCreates[key]; ok {
			c := seed
			c.body = []byte(body)
			cases = append(cases, dryRunCase{name: "create", req: c, valid: true})
		}
		if (strings.Contains(seed.tmpl, "{name}") || strings.Contains(seed.tmpl, "{id}") || strings.Contains(seed.tmpl, "{kind}")) && !dryRunUpserts[key] {
			c := seed
			c.tmpl = strings.NewReplacer("{name}", "missing", "{id}", "00000000-0000-0000-0000-000000000000", "{kind}", "missing").Replace(seed.tmpl)
			cases = append(cases, dryRunCase{name: "missing", req: c})
		}
		for _, r := range dryRunRefusals[key] {
			c := seed
			c.body = r.req.body
			cases = append(cases, dryRunCase{name: r.name, req: c})
		}
		t.Run(key, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { m.checkDryRun(t, c) })
			}
		})
	}
	if routes < 20 {
		t.Errorf("the OpenAPI document has %d write routes; want at least the 20 this test was written against", routes)
	}
	m.checkDryRunDocumented(t)
}

// checkDryRunDocumented checks that the OpenAPI document gives every write
// operation the dry_run query parameter and every one of its answers the
// Dry-Run header, but 401 and 403: authentication refuses a request before
// its dry run begins.
func (m *mutator) checkDryRunDocumented(t *testing.T) {
	t.Helper()
	r := m.send(request{method: http.MethodGet, path: "/openapi.json"})
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name, In string } `json:"parameters"`
			Responses  map[string]struct {
				Headers map[string]json.RawMessage `json:"headers"`
			} `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	for path, item := range doc.Paths {
		for method, op := range item {
			if !slices.Contains([]string{"post", "put", "patch", "delete"}, method) {
				continue
			}
			if !slices.ContainsFunc(op.Parameters, func(p struct{ Name, In string }) bool { return p.Name == "dry_run" && p.In == "query" }) {
				t.Errorf("%s %s does not document ?dry_run", method, path)
			}
			for status, resp := range op.Responses {
				if _, ok := resp.Headers["Dry-Run"]; !ok && status != "401" && status != "403" {
					t.Errorf("%s %s: its %s answer does not document Dry-Run", method, path, status)
				}
			}
		}
	}
}

// checkDryRun sends c dry, checks that it changed nothing, then sends it
// for real and compares the answers.
func (m *mutator) checkDryRun(t *testing.T, c dryRunCase) {
	t.Helper()
	m.restore()
	m.seedDelivery(t)
	for _, s := range c.setup {
		s.contentType = "application/json"
		if a := m.send(s); a.err != nil || a.status >= 300 {
			t.Fatalf("setup: %s", a.dump(s))
		}
	}
	req := c.req
	req.path = m.fill(req.tmpl)
	if len(req.body) > 0 {
		req.contentType = "application/json"
	}
	before, sent := m.fingerprint(), m.sent.Load()
	dryReq := req
	dryReq.query = "dry_run=true"
	dry := m.send(dryReq)
	if dry.err != nil {
		t.Fatal(dry.err)
	}
	if n := m.sent.Load() - sent; n != 0 {
		t.Errorf("the dry run sent %d test deliveries: %s", n, dry.dump(dryReq))
	}
	if after := m.fingerprint(); after != before {
		t.Errorf("the dry run wrote to the database:\n before %s\n after  %s\n%s", before, after, dry.dump(dryReq))
	}
	if got := dry.header.Get("Dry-Run"); got != "true" {
		t.Errorf("Dry-Run header %q, want true: %s", got, dry.dump(dryReq))
	}
	real := m.send(req)
	if real.err != nil {
		t.Fatal(real.err)
	}
	switch {
	case c.valid && real.status >= 300:
		t.Fatalf("the valid request was refused: %s", real.dump(req))
	case !c.valid && real.status < 400:
		t.Fatalf("the invalid request was not refused: %s", real.dump(req))
	}
	if dry.status != real.status {
		t.Fatalf("dry run answered %d, the real write %d:\n dry:  %s\n real: %s", dry.status, real.status, dry.dump(dryReq), real.dump(req))
	}
	if d, r := dry.header.Get("X-Apply-Result"), real.header.Get("X-Apply-Result"); d != r {
		t.Errorf("X-Apply-Result: dry run %q, real %q", d, r)
	}
	if dryRunUnsent[req.tmpl] {
		if c.valid && !strings.Contains(string(dry.body), `"classification":"not_sent"`) {
			t.Errorf("the dry run's answer does not say nothing was sent: %s", dry.body)
		}
		return
	}
	realBody, _ := normalAnswer(t, real.body)
	dryBody, secret := normalAnswer(t, dry.body)
	if diff := cmp.Diff(realBody, dryBody); diff != "" {
		t.Errorf("the dry run's answer differs from the real write's (-real +dry):\n%s", diff)
	}
	if secret {
		t.Errorf("the dry run's answer shows a signing secret: %s", dry.body)
	}
}

// seedDelivery records a failed delivery of b1's reconcile task at ep, for
// the replay route ({id}), unless there is one.
func (m *mutator) seedDelivery(t *testing.T) {
	t.Helper()
	err := m.db.Pool.QueryRow(t.Context(), `WITH d AS (
	    INSERT INTO endpoint_deliveries (endpoint, task_id, resource_id, kind, name, task_type, claim_epoch, attempt, latency_ms, classification)
	    SELECT 'ep', gen_random_uuid(), id, kind, name, 'reconcile', 1, 1, 5, 'timeout' FROM resources WHERE kind = 'box' AND name = 'b1'
	       AND NOT EXISTS (SELECT 1 FROM endpoint_deliveries)
	    RETURNING id)
	SELECT id::text FROM d UNION ALL SELECT max(id)::text FROM endpoint_deliveries HAVING NOT EXISTS (SELECT 1 FROM d)`).Scan(&m.deliveryID)
	if err != nil {
		t.Fatal(err)
	}
}

// normalAnswer decodes an answer's JSON body with the dryRunVolatile
// members blanked and any signing secret (a "secret" member) removed, and
// says whether it held a secret; an empty body is nil.
func normalAnswer(t *testing.T, body []byte) (any, bool) {
	t.Helper()
	if len(body) == 0 {
		return nil, false
	}
	secret := false
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, excerpt(body))
	}
	var blank func(any)
	blank = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k == "secret" {
					secret = secret || e != ""
					delete(x, k)
					continue
				}
				if slices.Contains(dryRunVolatile, k) {
					x[k] = "<volatile>"
					continue
				}
				blank(e)
			}
		case []any:
			for _, e := range x {
				blank(e)
			}
		}
	}
	blank(v)
	return v, secret
}

// TestDryRunIdempotencyKey: a dry run sent with an Idempotency-Key neither
// takes nor keeps it, so the real request with the same key runs (it is not
// refused as another request's key, nor answered with the dry run's
// answer); a dry run sent with the key of a real request runs rather than
// replay the real answer; and a malformed key is refused as it is without
// dry_run.
func TestDryRunIdempotencyKey(t *testing.T) {
	t.Parallel()
	m := newMutator(t, 1)
	m.restore()
	create := dryRunCreates["POST /api/v1/resources"]
	send := func(query, key string) answer {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, m.base+"/api/v1/resources?"+query, strings.NewReader(create))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := m.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		if _, err := b.ReadFrom(resp.Body); err != nil {
			t.Fatal(err)
		}
		return answer{status: resp.StatusCode, header: resp.Header, body: b.Bytes()}
	}
	before := m.fingerprint()
	if a := send("dry_run=true", "key-1"); a.status != http.StatusCreated || a.header.Get("Dry-Run") != "true" {
		t.Fatalf("dry run: %d %s", a.status, a.body)
	}
	if after := m.fingerprint(); after != before {
		t.Errorf("the dry run with a key wrote to the database:\n before %s\n after  %s", before, after)
	}
	a := send("", "key-1")
	if a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "" || a.header.Get("Dry-Run") != "" {
		t.Errorf("the real request after the dry run: %d, Idempotent-Replayed %q, Dry-Run %q: %s",
			a.status, a.header.Get("Idempotent-Replayed"), a.header.Get("Dry-Run"), a.body)
	}
	a = send("dry_run=true", "key-1")
	if a.status != http.StatusOK || a.header.Get("Idempotent-Replayed") != "" || a.header.Get("X-Apply-Result") != "unchanged" {
		t.Errorf("a dry run with the key of a real request: %d, Idempotent-Replayed %q, X-Apply-Result %q: %s",
			a.status, a.header.Get("Idempotent-Replayed"), a.header.Get("X-Apply-Result"), a.body)
	}
	if a := send("dry_run=true", "key with spaces"); a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "Idempotency-Key") {
		t.Errorf("a malformed key with dry_run: %d %s", a.status, a.body)
	}
}

// TestDryRunParameter: dry_run=false is an ordinary write, a value that is
// not a boolean is a 400 naming the parameter, and a read does not take it.
func TestDryRunParameter(t *testing.T) {
	t.Parallel()
	m := newMutator(t, 1)
	m.restore()
	body := []byte(dryRunCreates["POST /api/v1/resources"])
	before := m.fingerprint()
	a := m.send(request{method: http.MethodPost, path: "/api/v1/resources", query: "dry_run=yes", contentType: "application/json", body: body})
	if a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "query.dry_run") || notProblem(a) != "" {
		t.Errorf("dry_run=yes: %s", a.dump(request{}))
	}
	if after := m.fingerprint(); after != before {
		t.Errorf("a refused dry_run wrote to the database")
	}
	a = m.send(request{method: http.MethodGet, path: "/api/v1/resources", query: "dry_run=true"})
	if a.status < 400 || a.status >= 500 || notProblem(a) != "" {
		t.Errorf("GET with dry_run: %s", a.dump(request{}))
	}
	a = m.send(request{method: http.MethodPost, path: "/api/v1/resources", query: "dry_run=false", contentType: "application/json", body: body})
	if a.status != http.StatusCreated || a.header.Get("Dry-Run") != "" {
		t.Errorf("dry_run=false: %s", a.dump(request{}))
	}
	if after := m.fingerprint(); after == before {
		t.Errorf("dry_run=false wrote nothing")
	}
}

// TestDryRunSendsNoNotification: a dry run's NOTIFY goes with its rollback.
// A listener on kind_manifest_changed sees a dry-run manifest put, then a
// real one; notifications arrive in commit order, so the first it gets
// must be the real one's.
func TestDryRunSendsNoNotification(t *testing.T) {
	t.Parallel()
	m := newMutator(t, 1)
	conn, err := m.db.Pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(t.Context(), "LISTEN kind_manifest_changed"); err != nil {
		t.Fatal(err)
	}
	put := func(kind, query string) {
		t.Helper()
		req := request{method: http.MethodPut, path: "/api/v1/kinds/" + kind + "/manifest", query: query, contentType: "application/json",
			body: []byte(strings.Replace(loneManifest, `"lone"`, `"`+kind+`"`, 1))}
		if a := m.send(req); a.err != nil || a.status != http.StatusCreated {
			t.Fatalf("%s", a.dump(req))
		}
	}
	put("dry", "dry_run=true")
	put("real", "")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Payload != "real/1" {
		t.Errorf("the first notification is %q, want the real put's real/1: the dry run's escaped", n.Payload)
	}
}
