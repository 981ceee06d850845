package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// batchAnswer is the decoded answer of POST /resources:batch.
type batchAnswer struct {
	Results []struct {
		Index      int            `json:"index"`
		Kind       string         `json:"kind"`
		Name       string         `json:"name"`
		Result     string         `json:"result"`
		ID         string         `json:"id"`
		Generation int64          `json:"generation"`
		Errors     []problemError `json:"errors"`
	} `json:"results"`
	Created, Updated, Unchanged, Invalid int
}

func (b *testBundle) batch(body any, hdr ...string) response {
	b.t.Helper()
	return b.do(http.MethodPost, "/api/v1/resources:batch", body, hdr...)
}

func (r response) batchAnswer(t *testing.T) batchAnswer {
	t.Helper()
	var a batchAnswer
	r.want(t, http.StatusOK).decode(t, &a)
	return a
}

// results lists "index:result" of every item, to compare in one line.
func (a batchAnswer) results() string {
	var s []string
	for _, r := range a.Results {
		s = append(s, fmt.Sprintf("%d:%s", r.Index, r.Result))
	}
	return strings.Join(s, " ")
}

func widget(name, spec string) string {
	return fmt.Sprintf(`{"kind":"widget","kind_version":1,"name":%q,"spec":%s}`, name, spec)
}

func TestApplyResourceBatch(t *testing.T) {
	t.Parallel()
	setupWidget := func(t *testing.T, cfg api.Config) *testBundle {
		t.Helper()
		b := setup(t, cfg)
		b.putManifest("widget", widgetKind).wantApply(t, "created")
		b.putManifest("noop", noopKind).wantApply(t, "created")
		return b
	}

	t.Run("MixedValidAndInvalid", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t, api.Config{})
		body := `{"items":[` + strings.Join([]string{
			widget("w0", `{"image":"a"}`),
			widget("w1", `{"image":"a","replicas":99}`),                   // schema: maximum
			`{"kind":"widget","name":"w2","spec":{"image":"a"}}`,          // no kind_version
			widget("W 3", `{"image":"a"}`),                                // name pattern
			`{"kind":"widget","kind_version":1,"name":"w4","bogus":true}`, // unknown field
			`{"kind":"nope","kind_version":1,"name":"w5"}`,                // unknown kind
			widget("w0", `{"image":"b"}`),                                 // duplicate of item 0
			`{"kind":"widget","kind_version":1,"name":"w7","labels":{"a":1},"spec":{"image":"a"}}`,
			widget("w8", `{"image":"a"}`),
		}, ",") + `]}`
		a := b.batch(body).batchAnswer(t)
		if got, want := a.results(), "0:created 1:invalid 2:invalid 3:invalid 4:invalid 5:invalid 6:invalid 7:invalid 8:created"; got != want {
			t.Fatalf("results %s, want %s", got, want)
		}
		if a.Created != 2 || a.Invalid != 7 || a.Updated != 0 || a.Unchanged != 0 {
			t.Fatalf("counts %+v", a)
		}
		wantAt := map[int]string{1: "items[1].spec.replicas", 2: "items[2].kind_version", 3: "items[3].name",
			4: "items[4]", 5: "items[5].kind", 6: "items[6].name", 7: "items[7].labels.a"}
		for i, loc := range wantAt {
			r := a.Results[i]
			if len(r.Errors) == 0 || r.Errors[0].Location != loc || r.Errors[0].Message == "" {
				t.Errorf("item %d errors %+v, want one at %s", i, r.Errors, loc)
			}
			if r.ID != "" || r.Generation != 0 {
				t.Errorf("invalid item %d has id %q generation %d", i, r.ID, r.Generation)
			}
		}
		if a.Results[1].Kind != "widget" || a.Results[1].Name != "w1" || a.Results[4].Name != "w4" {
			t.Errorf("invalid items not named: %+v %+v", a.Results[1], a.Results[4])
		}
		// Only the two valid items were written, with their events, spec
		// revisions and tasks; item 6 did not overwrite item 0.
		if n := b.count(`SELECT count(*) FROM resources`); n != 2 {
			t.Fatalf("%d resources, want 2", n)
		}
		if n := b.count(`SELECT count(*) FROM resource_events WHERE type = 'applied'`); n != 2 {
			t.Fatalf("%d applied events, want 2", n)
		}
		if n := b.count(`SELECT count(*) FROM resource_spec_history`); n != 2 {
			t.Fatalf("%d spec revisions, want 2", n)
		}
		if n := b.count(`SELECT count(*) FROM work_queue`); n != 2 {
			t.Fatalf("%d work rows, want 2", n)
		}
		if g := b.get(t, "widget", "w0"); g.Spec["image"] != "a" || g.ID != a.Results[0].ID || g.Generation != 1 {
			t.Fatalf("w0 = %+v, want image a, id %s, generation 1", g, a.Results[0].ID)
		}
	})

	t.Run("CreatedUpdatedUnchanged", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t, api.Config{})
		first := b.batch(`{"items":[` + widget("a", `{"image":"x"}`) + `,` + widget("b", `{"image":"x"}`) + `,` +
			`{"kind":"noop","kind_version":1,"name":"n"}]}`).batchAnswer(t)
		if got := first.results(); got != "0:created 1:created 2:created" || first.Created != 3 {
			t.Fatalf("first: %s %+v", got, first)
		}
		// A noop resource is synced by scheduling (no task): none queued.
		if n := b.count(`SELECT count(*) FROM work_queue`); n != 2 {
			t.Fatalf("%d work rows, want 2 (one per widget)", n)
		}
		if g := b.get(t, "noop", "n"); g.Phase != "Ready" {
			t.Fatalf("noop phase %s, want Ready as after a single apply", g.Phase)
		}
		b.exec(`DELETE FROM work_queue`)
		second := b.batch(`{"items":[` + widget("a", `{"image":"x"}`) + `,` + widget("b", `{"image":"y"}`) + `,` +
			`{"kind":"noop","kind_version":1,"name":"n","labels":{"t":"1"}}]}`).batchAnswer(t)
		if got := second.results(); got != "0:unchanged 1:updated 2:updated" || second.Unchanged != 1 || second.Updated != 2 {
			t.Fatalf("second: %s %+v", got, second)
		}
		r := second.Results
		if r[0].ID != first.Results[0].ID || r[0].Generation != 1 || r[1].Generation != 2 || r[2].Generation != 1 {
			t.Fatalf("ids or generations: first %+v second %+v", first.Results, r)
		}
		// The changed widget is rescheduled; the unchanged one is not, and
		// a label change (same generation) schedules nothing.
		if n := b.count(`SELECT count(*) FROM work_queue w JOIN resources r ON r.id = w.resource_id WHERE r.name = 'b'`); n != 1 {
			t.Fatalf("%d work rows for b, want 1", n)
		}
		if n := b.count(`SELECT count(*) FROM work_queue`); n != 1 {
			t.Fatalf("%d work rows, want 1", n)
		}
		if n := b.count(`SELECT count(*) FROM resource_spec_history`); n != 4 {
			t.Fatalf("%d spec revisions, want 4 (3 created, b revised; a label change keeps the generation)", n)
		}
	})

	t.Run("NDJSON", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t, api.Config{})
		body := widget("a", `{"image":"x"}`) + "\n\n" + `{"kind":"widget",` + "\n" + widget("c", `{"image":"x"}`) + "\n"
		a := b.batch(body, "Content-Type: application/x-ndjson").batchAnswer(t)
		if got := a.results(); got != "0:created 1:invalid 2:created" {
			t.Fatalf("results %s", got)
		}
		if e := a.Results[1].Errors; len(e) != 1 || e[0].Location != "items[1]" {
			t.Fatalf("line errors %+v", e)
		}
		// A listing (created_at, id order) shows a batch in the order sent,
		// though its resources share created_at.
		body = widget("z", `{"image":"x"}`) + "\n" + widget("m", `{"image":"x"}`) + "\n" + widget("b", `{"image":"x"}`)
		b.batch(body, "Content-Type: application/x-ndjson").batchAnswer(t)
		var l resourceList
		b.do(http.MethodGet, "/api/v1/resources", nil).want(t, http.StatusOK).decode(t, &l)
		var order []string
		for _, r := range l.Items {
			order = append(order, r.Name)
		}
		if got := strings.Join(order, " "); got != "a c z m b" {
			t.Fatalf("listing order %q, want the order sent: a c z m b", got)
		}
		// Elsewhere NDJSON is still refused.
		b.do(http.MethodPost, "/api/v1/resources", widget("z", `{}`), "Content-Type: application/x-ndjson").wantProblem(t, http.StatusUnsupportedMediaType, "header.Content-Type")
	})

	t.Run("ItemLimit", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t, api.Config{BatchMaxItems: 2})
		body := `{"items":[` + widget("a", `{"image":"x"}`) + `,` + widget("b", `{"image":"x"}`) + `,` + widget("c", `{"image":"x"}`) + `]}`
		p := b.batch(body).wantProblem(t, http.StatusRequestEntityTooLarge, "body.items")
		if !strings.Contains(p.Errors[0].Message, "at most 2") {
			t.Fatalf("message %q", p.Errors[0].Message)
		}
		b.batch(`{"items":[]}`).wantProblem(t, http.StatusUnprocessableEntity, "body.items")
		b.batch(`{}`).wantProblem(t, http.StatusUnprocessableEntity, "body.items")
		if n := b.count(`SELECT count(*) FROM resources`); n != 0 {
			t.Fatalf("%d resources written by refused batches", n)
		}
	})

	t.Run("Unparseable", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t, api.Config{})
		for _, body := range []string{
			`{"items":[` + widget("a", `{"image":"x"}`) + `,`,
			`{"items":[` + widget("a", `{"image":"x"}`) + `],"extra":1}`,
			`{"items":{}}`,
			`[` + widget("a", `{"image":"x"}`) + `]`,
		} {
			b.batch(body).wantProblem(t, http.StatusBadRequest, "")
		}
		if n := b.count(`SELECT count(*) FROM resources`); n != 0 {
			t.Fatalf("%d resources written by unparseable bodies", n)
		}
	})

	t.Run("ResultsLineUpAcrossChunks", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t, api.Config{})
		// 1,234 items (three chunks of valid ones), every 97th invalid.
		const n = 1234
		items := make([]string, n)
		for i := range items {
			spec := `{"image":"a"}`
			if i%97 == 0 {
				spec = `{"image":"a","replicas":0}`
			}
			items[i] = widget(fmt.Sprintf("c%04d", i), spec)
		}
		a := b.batch(`{"items":[` + strings.Join(items, ",") + `]}`).batchAnswer(t)
		invalid := (n + 96) / 97
		if len(a.Results) != n || a.Invalid != invalid || a.Created != n-invalid {
			t.Fatalf("%d results, counts %d created %d invalid", len(a.Results), a.Created, a.Invalid)
		}
		ids := map[string]string{}
		rows, err := b.db.Pool.Query(t.Context(), `SELECT name, id::text FROM resources`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name, id string
			if err := rows.Scan(&name, &id); err != nil {
				t.Fatal(err)
			}
			ids[name] = id
		}
		if len(ids) != n-invalid {
			t.Fatalf("%d resources, want %d", len(ids), n-invalid)
		}
		for i, r := range a.Results {
			name := fmt.Sprintf("c%04d", i)
			want := "created"
			if i%97 == 0 {
				want = "invalid"
			}
			if r.Index != i || r.Name != name || r.Result != want || r.ID != ids[name] {
				t.Fatalf("result %d = %+v, want %s %s id %q", i, r, name, want, ids[name])
			}
		}
		if w := b.count(`SELECT count(*) FROM work_queue`); w != n-invalid {
			t.Fatalf("%d work rows, want one per created widget (%d)", w, n-invalid)
		}
	})

	t.Run("GateRefusalsAreItemErrors", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t, api.Config{})
		b.putManifest("sink", `{"kind":"sink","kind_version":1,"reactions":[{"name":"r","trigger":"reactor","emits":["sideEffect"]}]}`).
			wantApply(t, "created")
		b.do(http.MethodPost, "/api/v1/providerconfigs", `{"name":"noop-cfg","kind":"noop","kind_version":1,"spec":{}}`).
			want(t, http.StatusCreated)
		a := b.batch(`{"items":[` + strings.Join([]string{
			`{"kind":"sink","kind_version":1,"name":"s"}`,
			`{"kind":"widget","kind_version":1,"name":"p1","spec":{"image":"a"},"provider_config_ref":"missing"}`,
			`{"kind":"widget","kind_version":1,"name":"p2","spec":{"image":"a"},"provider_config_ref":"noop-cfg"}`,
			`{"kind":"noop","kind_version":1,"name":"p3","provider_config_ref":"noop-cfg"}`,
		}, ",") + `]}`).batchAnswer(t)
		if got := a.results(); got != "0:invalid 1:invalid 2:invalid 3:created" {
			t.Fatalf("results %s", got)
		}
		for i, loc := range []string{"items[0].kind", "items[1].provider_config_ref", "items[2].provider_config_ref"} {
			if e := a.Results[i].Errors; len(e) != 1 || e[0].Location != loc {
				t.Errorf("item %d errors %+v, want one at %s", i, e, loc)
			}
		}
		if n := b.count(`SELECT count(*) FROM resources`); n != 1 {
			t.Fatalf("%d resources, want 1", n)
		}
		if r := b.get(t, "noop", "p3"); r.ProviderConfigRef != "noop-cfg" {
			t.Fatalf("p3 provider_config_ref %q", r.ProviderConfigRef)
		}
	})

	t.Run("BeingDeleted", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t, api.Config{})
		b.apply(widget("d", `{"image":"x"}`)).wantApply(t, "created")
		b.do(http.MethodDelete, "/api/v1/resources/widget/d", nil).want(t, http.StatusAccepted)
		a := b.batch(`{"items":[` + widget("d", `{"image":"y"}`) + `,` + widget("e", `{"image":"y"}`) + `]}`).batchAnswer(t)
		if got := a.results(); got != "0:invalid 1:created" || !strings.Contains(a.Results[0].Errors[0].Message, "being deleted") {
			t.Fatalf("results %s %+v", got, a.Results[0].Errors)
		}
	})

	t.Run("Auth", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{ReadTokens: []string{"r"}, AdminTokens: []string{"a"}})
		b.batch(`{"items":[]}`).wantProblem(t, http.StatusUnauthorized, "")
		b.batch(`{"items":[]}`, "Authorization: Bearer r").wantProblem(t, http.StatusForbidden, "")
		b.batch(`{"items":[]}`, "Authorization: Bearer a").wantProblem(t, http.StatusUnprocessableEntity, "body.items")
	})

	t.Run("RouteIsLiteral", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		var doc struct {
			Paths map[string]map[string]struct {
				OperationID string `json:"operationId"`
				RequestBody struct {
					Content map[string]any `json:"content"`
				} `json:"requestBody"`
			} `json:"paths"`
		}
		b.do(http.MethodGet, "/openapi.json", nil).want(t, http.StatusOK).decode(t, &doc)
		op := doc.Paths["/api/v1/resources:batch"]["post"]
		if op.OperationID != "apply-resources-batch" || op.RequestBody.Content["application/json"] == nil ||
			op.RequestBody.Content["application/x-ndjson"] == nil {
			t.Fatalf("the OpenAPI document lacks POST /api/v1/resources:batch with both media types: %+v", op)
		}
		b.do(http.MethodPost, "/api/v1/resources:other", `{"items":[]}`).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodPost, "/api/v1/resourcesbatch", `{"items":[]}`).wantProblem(t, http.StatusNotFound, "")
	})
}
