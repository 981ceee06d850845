package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// TestBadInput covers every bad input of issue 2 §9: each is answered with a
// problem document naming the field, and writes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()

	// setupVPC publishes vpc/1 and returns the number of resources and
	// manifests, which every case re-checks after its bad request.
	setupVPC := func(t *testing.T, cfg api.Config) *testBundle {
		t.Helper()
		b := setup(t, cfg)
		b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
		return b
	}
	nothingWritten := func(t *testing.T, b *testBundle) {
		t.Helper()
		if n := b.count(`SELECT count(*) FROM resources`); n != 0 {
			t.Errorf("%d resources exist after a refused request, want 0", n)
		}
		if n := b.count(`SELECT count(*) FROM kind_manifest`); n != 1 {
			t.Errorf("%d manifests exist after a refused request, want 1", n)
		}
		if n := b.count(`SELECT count(*) FROM resource_events`); n != 0 {
			t.Errorf("%d events exist after a refused request, want 0", n)
		}
		// And the published manifest is still the original.
		m := mustGet(t, b, "/api/v1/kinds/vpc/versions/1/manifest")
		if !strings.Contains(string(m["description"]), "Produces status.vpc_id") {
			t.Errorf("manifest changed: %s", m["description"])
		}
	}
	validVPC := `{"kind":"vpc","kind_version":1,"name":"v","spec":{"account_id":"123456789012","cidr":"10.0.0.0/16"}}`

	t.Run("MalformedJSON", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		for _, body := range []string{`{"kind":"vpc",`, `{"kind":"vpc"} {"kind":"vpc"}`, `{kind: vpc}`, `[]`, `"vpc"`} {
			b.apply(body).wantProblem(t, http.StatusBadRequest, "body")
		}
		b.putManifest("vpc", `{"kind":"vpc","kind_version":1,"reactions":[`).wantProblem(t, http.StatusBadRequest, "body")
		b.do(http.MethodPost, "/api/v1/resources", "").wantProblem(t, http.StatusBadRequest, "")
		nothingWritten(t, b)
	})

	t.Run("WrongContentType", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		b.do(http.MethodPost, "/api/v1/resources", validVPC, "Content-Type: text/plain").
			wantProblem(t, http.StatusUnsupportedMediaType, "header.Content-Type")
		nothingWritten(t, b)
	})

	t.Run("BodyOverTheLimit", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{BodyLimit: 2048})
		big := fmt.Sprintf(`{"kind":"vpc","kind_version":1,"name":"v","spec":{"account_id":"123456789012","cidr":"10.0.0.0/16","tags":{"pad":%q}}}`,
			strings.Repeat("x", 4096))
		p := b.apply(big).wantProblem(t, http.StatusRequestEntityTooLarge, "body")
		if !strings.Contains(p.Detail, "2048") {
			t.Errorf("detail %q does not state the limit", p.Detail)
		}
		b.putManifest("vpc", `{"kind":"vpc","kind_version":1,"description":"`+strings.Repeat("y", 4096)+`","reactions":[]}`).
			wantProblem(t, http.StatusRequestEntityTooLarge, "body")
		// A body just under the limit passes.
		b.apply(validVPC).wantApply(t, "created")
		b.exec(`DELETE FROM resources`)
		b.exec(`DELETE FROM resource_events`)
		nothingWritten(t, b)
	})

	t.Run("UnknownKind", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		p := b.apply(`{"kind":"subnet","kind_version":1,"name":"s","spec":{}}`).wantProblem(t, http.StatusNotFound, "body.kind")
		if !strings.Contains(p.Detail, `"subnet"`) {
			t.Errorf("detail %q does not name the kind", p.Detail)
		}
		p = b.apply(`{"kind":"vpc","kind_version":7,"name":"s","spec":{}}`).wantProblem(t, http.StatusNotFound, "body.kind_version")
		if !strings.Contains(p.Detail, "published: 1") {
			t.Errorf("detail %q does not list the published versions", p.Detail)
		}
		b.do(http.MethodPost, "/api/v1/providerconfigs", `{"name":"c","kind":"subnet","kind_version":1}`).
			wantProblem(t, http.StatusNotFound, "body.kind")
		nothingWritten(t, b)
	})

	t.Run("KindVersion", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		for _, tc := range []struct{ name, version string }{
			{"Missing", ""}, {"Null", `"kind_version":null,`}, {"Zero", `"kind_version":0,`},
			{"Negative", `"kind_version":-1,`}, {"TooBig", `"kind_version":32768,`},
			{"Huge", `"kind_version":1e10,`}, {"Fraction", `"kind_version":1.5,`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b.apply(`{`+tc.version+`"kind":"vpc","name":"v","spec":{"account_id":"123456789012","cidr":"10.0.0.0/16"}}`).
					wantProblem(t, http.StatusUnprocessableEntity, "body.kind_version")
				b.putManifest("vpc", `{`+tc.version+`"kind":"vpc","reactions":[]}`).
					wantProblem(t, http.StatusUnprocessableEntity, "body.kind_version")
				b.do(http.MethodPost, "/api/v1/providerconfigs", `{`+tc.version+`"name":"c","kind":"vpc"}`).
					wantProblem(t, http.StatusUnprocessableEntity, "body.kind_version")
			})
		}
		// Not a number at all is malformed, not a rule violation.
		b.apply(`{"kind":"vpc","kind_version":"1","name":"v"}`).wantProblem(t, http.StatusBadRequest, "body.kind_version")
		b.do(http.MethodGet, "/api/v1/kinds/vpc/versions/32768/manifest", nil).wantProblem(t, http.StatusUnprocessableEntity, "path.version")
		nothingWritten(t, b)
	})

	t.Run("SpecViolatesSchema", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		p := b.apply(`{"kind":"vpc","kind_version":1,"name":"v","spec":{"account_id":"12345","cidr":"10.0.0.0/16","extra":true}}`).
			wantProblem(t, http.StatusBadRequest, "body.spec.account_id")
		e, _ := p.at("body.spec.account_id")
		if e.Pointer != "/spec/account_id" || e.Keyword != "minLength" || e.Value != "12345" {
			t.Errorf("error %+v, want pointer /spec/account_id, keyword minLength, value 12345", e)
		}
		if e, ok := p.at("body.spec.extra"); !ok || e.Keyword != "additionalProperties" {
			t.Errorf("no additionalProperties error at body.spec.extra: %+v", p.Errors)
		}
		if p.Type != "urn:converge:problem:invalid-document" {
			t.Errorf("type %q", p.Type)
		}
		// A missing required field points at the object lacking it.
		p = b.apply(`{"kind":"vpc","kind_version":1,"name":"v","spec":{"cidr":"10.0.0.0/16"}}`).
			wantProblem(t, http.StatusBadRequest, "body.spec")
		if e, _ := p.at("body.spec"); e.Keyword != "required" || !strings.Contains(e.Message, "account_id") {
			t.Errorf("error %+v, want required account_id", e)
		}
		// A spec that is not an object.
		b.apply(`{"kind":"vpc","kind_version":1,"name":"v","spec":[1,2]}`).wantProblem(t, http.StatusBadRequest, "body.spec")
		// Nested arrays are located with [i].
		b.putManifest("widget", widgetKind).wantApply(t, "created")
		p = b.apply(`{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"x","items":[{"n":1},{"n":"two"}]}}`).
			wantProblem(t, http.StatusBadRequest, "body.spec.items[1].n")
		if e, _ := p.at("body.spec.items[1].n"); e.Pointer != "/spec/items/1/n" || e.Keyword != "type" {
			t.Errorf("error %+v", e)
		}
		b.do(http.MethodDelete, "/api/v1/kinds/widget/versions/1/manifest", nil).want(t, http.StatusNoContent)
		nothingWritten(t, b)
	})

	t.Run("IllegalReactionCombination", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		for _, tc := range []struct{ name, reactions, loc, rule string }{
			{"ComposerWithoutStatus", `[{"name":"c","trigger":"specChange","emits":["children"]}]`, "body.reactions[0].emits", "must also emit status"},
			{"TwoReactors", `[{"name":"a","trigger":"reactor","emits":["sideEffect"]},{"name":"b","trigger":"reactor","emits":["sideEffect"]}]`, "body.reactions", "at most one reactor"},
			{"OperationWithoutVerb", `[{"name":"op","trigger":"operation","emits":["operationOutput"]}]`, "body.reactions[0].verb", "needs a verb"},
			{"DeleteWithoutFinalizer", `[{"name":"d","trigger":"deleteRequested","emits":["finalizer"]}]`, "body.reactions[0].finalizer", "needs a finalizer"},
			{"ReactorEmittingStatus", `[{"name":"r","trigger":"reactor","emits":["sideEffect","status"]}]`, "body.reactions[0].emits", "sideEffect"},
			{"UnknownTrigger", `[{"name":"x","trigger":"onTuesday","emits":["status"]}]`, "body.reactions[0].trigger", "is not one of"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := b.putManifest("bad", `{"kind":"bad","kind_version":1,"reactions":`+tc.reactions+`}`).
					wantProblem(t, http.StatusUnprocessableEntity, tc.loc)
				if e, _ := p.at(tc.loc); !strings.Contains(e.Message, tc.rule) {
					t.Errorf("message %q does not name the rule %q", e.Message, tc.rule)
				}
			})
		}
		nothingWritten(t, b)
	})

	// A schema whose $refs loop was published, and then every resource of
	// the kind was refused ("reference cycle"). It is refused at publish.
	t.Run("CyclicSchemaRef", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		cyclic := `{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"$ref":"#/$defs/y"},"y":{"allOf":[{"$ref":"#/$defs/x"}]}}}`
		for _, field := range []string{"spec_schema", "config_schema"} {
			p := b.putManifest("loop", `{"kind":"loop","kind_version":1,"`+field+`":`+cyclic+`,"reactions":[]}`).
				wantProblem(t, http.StatusUnprocessableEntity, "body."+field)
			if e, _ := p.at("body." + field); !strings.Contains(e.Message, "cycle") {
				t.Errorf("message %q does not name the cycle", e.Message)
			}
		}
		// Recursion that descends into the document is fine.
		tree := `{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}}`
		b.putManifest("tree", `{"kind":"tree","kind_version":1,"spec_schema":`+tree+`,"reactions":[]}`).wantApply(t, "created")
		b.apply(`{"kind":"tree","kind_version":1,"name":"t","spec":{"children":[{"children":[]}]}}`).wantApply(t, "created")
	})

	t.Run("BreakingRepublish", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		p := b.putManifest("vpc", fixture(t, "vpc-v1-breaking.json")).wantProblem(t, http.StatusConflict, "body.spec_schema.properties.region")
		if e, _ := p.at("body.spec_schema.properties.region"); e.Message != "newly required" {
			t.Errorf("change %+v, want region newly required", e)
		}
		if p.Type != "urn:converge:problem:breaking-change" || !strings.Contains(p.Detail, "new kind_version") {
			t.Errorf("problem %+v", p)
		}
		nothingWritten(t, b)
	})

	t.Run("InvalidResourceName", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		for _, name := range []string{"'; DROP TABLE resources; --", "", "-leading", "has space", "ünïcode", strings.Repeat("a", 254)} {
			p := b.apply(fmt.Sprintf(`{"kind":"vpc","kind_version":1,"name":%q,"spec":{"account_id":"123456789012","cidr":"10.0.0.0/16"}}`, name)).
				wantProblem(t, http.StatusUnprocessableEntity, "body.name")
			if e, _ := p.at("body.name"); e.Value != name && name != "" {
				t.Errorf("value %v, want the name echoed", e.Value)
			}
		}
		b.do(http.MethodGet, "/api/v1/resources/vpc/"+url.PathEscape("'; DROP TABLE resources; --"), nil).wantProblem(t, http.StatusNotFound, "")
		nothingWritten(t, b)
	})

	t.Run("NonStringLabels", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		for _, labels := range []string{`{"team":5}`, `{"team":true}`, `{"team":null}`, `{"team":{"a":"b"}}`, `{"team":["a"]}`} {
			b.apply(`{"kind":"vpc","kind_version":1,"name":"v","labels":`+labels+`,"spec":{"account_id":"123456789012","cidr":"10.0.0.0/16"}}`).
				wantProblem(t, http.StatusBadRequest, "body.labels.team")
		}
		b.apply(`{"kind":"vpc","kind_version":1,"name":"v","labels":["team"],"spec":{}}`).wantProblem(t, http.StatusBadRequest, "body.labels")
		nothingWritten(t, b)
	})

	t.Run("MetacharactersAndUnicodeStoredIntact", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		labels := map[string]string{
			"owner":                     "Zoë O'Brien; DROP TABLE resources; --",
			"团队":                        "支付",
			"emoji 🚀":                   "✓ \"quoted\" \\ back\\slash",
			"sql' OR '1'='1":            "$1 %s %% _ \\x00",
			"path/../../etc":            "<script>alert(1)</script>",
			"whitespace\tand\nnewlines": " leading and trailing ",
		}
		body := map[string]any{"kind": "vpc", "kind_version": 1, "name": "meta.chars_ok-1", "labels": labels,
			"spec": map[string]any{"account_id": "Ωmega'--;\"12", "cidr": "10.0.0.0/16",
				"tags": map[string]any{"q": "' OR 1=1; --", "ü": "ℵ₀ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "json": `{"a":[1,2]}`}}}
		b.apply(body).wantApply(t, "created")
		got := b.get(t, "vpc", "meta.chars_ok-1")
		for k, v := range labels {
			if got.Labels[k] != v {
				t.Errorf("label %q = %q, want %q", k, got.Labels[k], v)
			}
		}
		tags, _ := got.Spec["tags"].(map[string]any)
		if got.Spec["account_id"] != "Ωmega'--;\"12" || tags["q"] != "' OR 1=1; --" || tags["ü"] != "ℵ₀ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢" {
			t.Errorf("spec came back changed: %v", got.Spec)
		}
		// The selector matches unicode labels too.
		var l resourceList
		b.do(http.MethodGet, "/api/v1/resources?label_selector="+url.QueryEscape("团队=支付"), nil).want(t, http.StatusOK).decode(t, &l)
		if len(l.Items) != 1 {
			t.Errorf("unicode selector matched %d resources, want 1", len(l.Items))
		}
		// Re-applying the same document is a no-op.
		b.apply(body).wantApply(t, "unchanged")
		// A NUL cannot be stored in jsonb: refused cleanly, not a 500, at
		// the string that holds it (see InvalidUTF8AndNUL).
		b.apply(`{"kind":"vpc","kind_version":1,"name":"nul","spec":{"account_id":"123456789012","cidr":"10.0.0.0/16","tags":{"a":"x\u0000y"}}}`).
			wantProblem(t, http.StatusBadRequest, "body.spec.tags.a")
		b.apply(`{"kind":"vpc","kind_version":1,"name":"nul","labels":{"a":"x\u0000y"},"spec":{"account_id":"123456789012","cidr":"10.0.0.0/16"}}`).
			wantProblem(t, http.StatusBadRequest, "body.labels.a")
		if n := b.count(`SELECT count(*) FROM resources`); n != 1 {
			t.Errorf("%d resources, want 1", n)
		}
	})

	// Invalid UTF-8 reached Postgres (SQLSTATE 22021) and answered 500, or
	// was silently replaced; a \u0000 reached it too. Both are refused as
	// 400 at the string that holds them, before any database work.
	t.Run("InvalidUTF8AndNUL", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		spec := func(tags string) string {
			return `"spec":{"account_id":"123456789012","cidr":"10.0.0.0/16","tags":` + tags + `}`
		}
		for _, tc := range []struct {
			name, method, path, body, loc, msg string
		}{
			{"ResourceSpecValue", http.MethodPost, "/api/v1/resources",
				`{"kind":"vpc","kind_version":1,"name":"v",` + spec("{\"name\":\"\xff\"}") + `}`, "body.spec.tags.name", "UTF-8"},
			{"ResourceSpecKey", http.MethodPost, "/api/v1/resources",
				`{"kind":"vpc","kind_version":1,"name":"v",` + spec("{\"\xc3\":\"a\"}") + `}`, "body.spec.tags", "key that is not valid UTF-8"},
			{"ResourceLabel", http.MethodPost, "/api/v1/resources",
				"{\"kind\":\"vpc\",\"kind_version\":1,\"name\":\"v\",\"labels\":{\"team\":\"\xed\xa0\x80\"}}", "body.labels.team", "UTF-8"},
			{"ResourceName", http.MethodPost, "/api/v1/resources",
				"{\"kind\":\"vpc\",\"kind_version\":1,\"name\":\"v\xff\"}", "body.name", "UTF-8"},
			{"ResourceSpecNUL", http.MethodPost, "/api/v1/resources",
				`{"kind":"vpc","kind_version":1,"name":"v",` + spec(`["ok","\u0000"]`) + `}`, "body.spec.tags[1]", "NUL"},
			{"ResourceSpecSurrogate", http.MethodPost, "/api/v1/resources",
				`{"kind":"vpc","kind_version":1,"name":"v",` + spec(`{"a":"\ud800x"}`) + `}`, "body.spec.tags.a", "surrogate"},
			{"ProviderConfigSpec", http.MethodPost, "/api/v1/providerconfigs",
				"{\"name\":\"c\",\"kind\":\"vpc\",\"kind_version\":1,\"spec\":{\"flow_logs_bucket\":\"\xff\"}}", "body.spec.flow_logs_bucket", "UTF-8"},
			{"ProviderConfigNUL", http.MethodPost, "/api/v1/providerconfigs",
				`{"name":"c","kind":"vpc","kind_version":1,"spec":{"flow_logs_bucket":"a\u0000"}}`, "body.spec.flow_logs_bucket", "NUL"},
			{"ManifestDescription", http.MethodPut, "/api/v1/kinds/vpc/manifest",
				"{\"kind\":\"vpc\",\"kind_version\":1,\"description\":\"\xff\",\"reactions\":[]}", "body.description", "UTF-8"},
			{"ManifestDescriptionNUL", http.MethodPut, "/api/v1/kinds/vpc/manifest",
				`{"kind":"vpc","kind_version":1,"description":"a\u0000","reactions":[]}`, "body.description", "NUL"},
			{"ManifestSchema", http.MethodPut, "/api/v1/kinds/vpc/manifest",
				"{\"kind\":\"vpc\",\"kind_version\":1,\"spec_schema\":{\"type\":\"object\",\"properties\":{\"name\":{\"description\":\"\xff\"}}},\"reactions\":[]}",
				"body.spec_schema.properties.name.description", "UTF-8"},
			{"ManifestSchemaNUL", http.MethodPut, "/api/v1/kinds/vpc/manifest",
				`{"kind":"vpc","kind_version":1,"spec_schema":{"type":"object","description":"\u0000"},"reactions":[]}`, "body.spec_schema.description", "NUL"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := b.do(tc.method, tc.path, tc.body).wantProblem(t, http.StatusBadRequest, tc.loc)
				if e, _ := p.at(tc.loc); !strings.Contains(e.Message, tc.msg) {
					t.Errorf("message %q does not say %q", e.Message, tc.msg)
				}
				if p.Type != "urn:converge:problem:malformed-request" {
					t.Errorf("type %q, want malformed-request", p.Type)
				}
			})
		}
		if n := b.count(`SELECT count(*) FROM providerconfigs`); n != 0 {
			t.Errorf("%d provider configs exist after refused requests, want 0", n)
		}
		// A valid U+FFFD and an escaped non-BMP rune are text like any other.
		b.apply(`{"kind":"vpc","kind_version":1,"name":"ok",`+spec(`{"a":"\ufffd \ud83d\ude80 �"}`)+`}`).wantApply(t, "created")
		b.exec(`DELETE FROM resources`)
		b.exec(`DELETE FROM resource_events`)
		nothingWritten(t, b)
	})

	// encoding/json kept the last of two equal keys: the first value was
	// silently dropped despite strict bodies.
	t.Run("DuplicateKeys", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		for _, tc := range []struct{ name, method, path, body, loc string }{
			{"TopLevel", http.MethodPost, "/api/v1/resources",
				`{"kind":"vpc","kind_version":1,"name":"v","name":"w","spec":{"account_id":"123456789012","cidr":"10.0.0.0/16"}}`, "body.name"},
			{"InSpec", http.MethodPost, "/api/v1/resources",
				`{"kind":"vpc","kind_version":1,"name":"v","spec":{"account_id":"123456789012","cidr":"10.0.0.0/16","cidr":"10.1.0.0/16"}}`, "body.spec.cidr"},
			{"InArray", http.MethodPut, "/api/v1/kinds/vpc/manifest",
				`{"kind":"vpc","kind_version":1,"reactions":[{"name":"a","trigger":"specChange","emits":["status"],"name":"b"}]}`, "body.reactions[0].name"},
			{"ProviderConfig", http.MethodPost, "/api/v1/providerconfigs",
				`{"name":"c","kind":"vpc","kind_version":1,"is_default":true,"is_default":false}`, "body.is_default"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := b.do(tc.method, tc.path, tc.body).wantProblem(t, http.StatusBadRequest, tc.loc)
				if e, _ := p.at(tc.loc); !strings.Contains(e.Message, "more than once") {
					t.Errorf("message %q does not say the key repeats", e.Message)
				}
			})
		}
		// The same key in two different objects is fine.
		b.apply(`{"kind":"vpc","kind_version":1,"name":"v","spec":{"account_id":"123456789012","cidr":"10.0.0.0/16","tags":{"name":"x"}}}`).
			wantApply(t, "created")
		b.exec(`DELETE FROM resources`)
		b.exec(`DELETE FROM resource_events`)
		nothingWritten(t, b)
	})

	// Query parameters reached the database unchecked: a NUL or invalid
	// UTF-8 failed there (SQLSTATE 22021) and a base64 cursor decoding to
	// NULs too, each answered 500. One validator checks every parameter of
	// every route first and answers 400 naming it.
	t.Run("QueryParameters", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		for _, tc := range []struct{ name, path, loc string }{
			{"ProviderConfigCursorOfNULs", "/api/v1/providerconfigs?cursor=AAAA", "query.cursor"},
			{"ResourceCursorOfNULs", "/api/v1/resources?cursor=AAAA", "query.cursor"},
			{"CursorNotBase64", "/api/v1/resources?cursor=not%20a%20cursor", "query.cursor"},
			{"CursorPadded", "/api/v1/providerconfigs?cursor=YQ%3D%3D", "query.cursor"},
			{"CursorNotOurs", "/api/v1/resources?cursor=YWJj", "query.cursor"}, // "abc": the store refuses it
			{"ResourceKindNUL", "/api/v1/resources?kind=%00", "query.kind"},
			{"ProviderConfigKindNUL", "/api/v1/providerconfigs?kind=%00", "query.kind"},
			{"ManifestKindNUL", "/api/v1/manifests?kind=%00", "query.kind"},
			{"BindingWatchKindNUL", "/api/v1/reactor-bindings?watch_kind=%00", "query.watch_kind"},
			{"BindingReactorControl", "/api/v1/reactor-bindings?reactor=a%1bb", "query.reactor"},
			{"KindInvalidUTF8", "/api/v1/resources?kind=%ff", "query.kind"},
			{"OwnerNUL", "/api/v1/resources?owner=%00", "query.owner"},
			{"SelectorNUL", "/api/v1/resources?label_selector=a%3D%00", "query.label_selector"},
			{"KindTooLong", "/api/v1/resources?kind=" + strings.Repeat("k", api.MaxQueryValueBytes+1), "query.kind"},
			{"NameNUL", "/api/v1/resources?%00=1", "query"},
			// A repeated single-valued parameter was silently read as its
			// first value.
			{"LimitTwice", "/api/v1/resources?limit=1&limit=3", "query.limit"},
			{"KindTwice", "/api/v1/resources?kind=bucket&kind=site", "query.kind"},
			{"SameKindTwice", "/api/v1/providerconfigs?kind=vpc&kind=vpc", "query.kind"},
			{"SelectorTwice", "/api/v1/resources?phase=Ready&label_selector=a%3Db&phase=Failed&label_selector=c%3Dd", "query.label_selector"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := b.do(http.MethodGet, tc.path, nil).wantProblem(t, http.StatusBadRequest, tc.loc)
				if p.Type != "urn:converge:problem:malformed-request" {
					t.Errorf("type %q, want malformed-request", p.Type)
				}
			})
		}
		// Within the limits everything still works: a tab in a selected
		// label value, a kind of the longest length, a cursor of ours.
		b.apply(`{"kind":"vpc","kind_version":1,"name":"v","labels":{"note":"a\tb"},"spec":{"account_id":"123456789012","cidr":"10.0.0.0/16"}}`).
			wantApply(t, "created")
		var l resourceList
		b.do(http.MethodGet, "/api/v1/resources?label_selector="+url.QueryEscape("note=a\tb"), nil).want(t, http.StatusOK).decode(t, &l)
		if len(l.Items) != 1 {
			t.Errorf("selector with a tab matched %d resources, want 1", len(l.Items))
		}
		b.do(http.MethodGet, "/api/v1/providerconfigs?kind="+strings.Repeat("k", api.MaxQueryValueBytes), nil).want(t, http.StatusOK)
		b.apply(`{"kind":"vpc","kind_version":1,"name":"w","spec":{"account_id":"123456789012","cidr":"10.0.0.0/16"}}`).wantApply(t, "created")
		b.do(http.MethodGet, "/api/v1/resources?limit=1", nil).want(t, http.StatusOK).decode(t, &l)
		if l.NextCursor == "" {
			t.Fatal("no next_cursor after a full page")
		}
		b.do(http.MethodGet, "/api/v1/resources?limit=1&cursor="+l.NextCursor, nil).want(t, http.StatusOK)
		// phase is a list: it repeats.
		b.do(http.MethodGet, "/api/v1/resources?phase=Ready&phase=Reconciling", nil).want(t, http.StatusOK).decode(t, &l)
		if len(l.Items) != 2 {
			t.Errorf("?phase=Ready&phase=Reconciling listed %d resources, want both", len(l.Items))
		}
		b.exec(`DELETE FROM resources`)
		b.exec(`DELETE FROM resource_events`)
		nothingWritten(t, b)
	})

	t.Run("UnknownField", func(t *testing.T) {
		t.Parallel()
		b := setupVPC(t, api.Config{})
		p := b.apply(`{"kind":"vpc","kindVersion":1,"name":"v"}`).wantProblem(t, http.StatusBadRequest, "body")
		if !strings.Contains(p.Detail, "kindVersion") {
			t.Errorf("detail %q does not name the field", p.Detail)
		}
		nothingWritten(t, b)
	})

	t.Run("UnknownRoute", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		b.do(http.MethodGet, "/api/v1/nothing-here", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodPatch, "/api/v1/resources", "{}").wantProblem(t, http.StatusMethodNotAllowed, "")
	})
}
