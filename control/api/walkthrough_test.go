package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// TestWalkthrough replays the reference walkthroughs (reference 000/003: the
// account, vpc and statussink manifests; reference 004: "Versioning" steps
// 1-6 and "Provider configs are per-(kind, kind_version) too" steps 1-5)
// with the fixtures in examples/versioning/testdata, asserting the status
// codes they state.
func TestWalkthrough(t *testing.T) {
	t.Parallel()

	// publish applies the reference manifests, as `make demo` would.
	publish := func(t *testing.T) *testBundle {
		t.Helper()
		b := setup(t, api.Config{})
		b.putManifest("account", fixture(t, "account.kind.json")).wantApply(t, "created")
		b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
		b.putManifest("vpc", fixture(t, "vpc-v2.kind.json")).wantApply(t, "created")
		b.putManifest("statussink", fixture(t, "statussink.kind.json")).wantApply(t, "created")
		return b
	}

	t.Run("ReferenceManifestsAndReactor", func(t *testing.T) {
		t.Parallel()
		b := publish(t)
		b.apply(fixture(t, "resource-account.json")).wantApply(t, "created")
		// The reactor's destination and its subscription (reference 003).
		b.do(http.MethodPost, "/api/v1/providerconfigs", fixture(t, "providerconfig-statussink.json")).wantApply(t, "created")
		b.do(http.MethodPost, "/api/v1/reactor-bindings", fixture(t, "reactor-binding-account-to-statussink.json")).wantApply(t, "created")
		b.do(http.MethodPost, "/api/v1/reactor-bindings", fixture(t, "reactor-binding-account-to-statussink.json")).wantApply(t, "unchanged")
	})

	t.Run("Versioning", func(t *testing.T) {
		t.Parallel()
		b := publish(t)

		// 1) A non-breaking v1 evolution (a new optional field) → 200.
		b.putManifest("vpc", fixture(t, "vpc-v1-additive.json")).wantApply(t, "configured")

		// 2) A breaking change on v1 (a new required field) → 409, naming it.
		p := b.putManifest("vpc", fixture(t, "vpc-v1-breaking.json")).wantProblem(t, http.StatusConflict, "body.spec_schema.properties.region")
		if !strings.Contains(p.Detail, "new kind_version") {
			t.Errorf("detail %q does not say to publish a new kind_version", p.Detail)
		}

		// 3) Both versions exist.
		v1 := mustGet(t, b, "/api/v1/kinds/vpc/versions/1/manifest")
		v2 := mustGet(t, b, "/api/v1/kinds/vpc/versions/2/manifest")
		if !strings.Contains(string(v1["spec_schema"]), "owner") || strings.Contains(string(v1["spec_schema"]), "region") {
			t.Errorf("v1 spec_schema is not the additive one: %s", v1["spec_schema"])
		}
		if !strings.Contains(string(v2["spec_schema"]), "region") {
			t.Errorf("v2 spec_schema lacks region: %s", v2["spec_schema"])
		}

		// 4) A v1 resource using the optional field.
		var tagged resource
		b.apply(fixture(t, "resource-vpc-v1-tagged.json")).wantApply(t, "created").decode(t, &tagged)
		if tagged.KindVersion != 1 {
			t.Fatalf("tagged resource at v%d", tagged.KindVersion)
		}

		// 5) A new v2 resource.
		var v2r resource
		b.apply(fixture(t, "resource-vpc-v2.json")).wantApply(t, "created").decode(t, &v2r)
		if v2r.KindVersion != 2 || v2r.Spec["region"] != "us-west-2" {
			t.Fatalf("v2 resource %+v", v2r)
		}

		// 6) Flip the live v1 resource to v2 in place; an incomplete v2
		//    spec is refused and leaves it on v1.
		b.apply(fixture(t, "resource-vpc-flip-to-v2-incomplete.json")).wantProblem(t, http.StatusBadRequest, "body.spec")
		if got := b.get(t, "vpc", "sample-vpc-tagged"); got.KindVersion != 1 {
			t.Fatalf("refused flip moved the resource to v%d", got.KindVersion)
		}
		var flipped resource
		b.apply(fixture(t, "resource-vpc-flip-to-v2.json")).wantApply(t, "configured").decode(t, &flipped)
		if flipped.ID != tagged.ID || flipped.KindVersion != 2 || flipped.Generation != tagged.Generation+1 {
			t.Fatalf("flip %+v, want id %s at v2 and generation %d", flipped, tagged.ID, tagged.Generation+1)
		}
	})

	t.Run("ProviderConfigsPerKindVersion", func(t *testing.T) {
		t.Parallel()
		b := publish(t)
		pc := func(name string) response {
			return b.do(http.MethodPost, "/api/v1/providerconfigs", fixture(t, name))
		}

		// 1) Per-version defaults coexist; each validates against its own
		//    version's config_schema (default_region exists only in v2).
		pc("providerconfig-vpc-v1-default.json").wantApply(t, "created")
		pc("providerconfig-vpc-v2-default.json").wantApply(t, "created")
		pc("providerconfig-vpc-v1-default.json").wantApply(t, "unchanged")
		b.do(http.MethodPost, "/api/v1/providerconfigs",
			`{"name":"vpc-v1-regional","kind":"vpc","kind_version":1,"spec":{"default_region":"us-east-1"}}`).
			wantProblem(t, http.StatusBadRequest, "body.spec.default_region")

		// 2) A second default for vpc/1 → 409 naming the existing one.
		p := pc("providerconfig-vpc-v1-second-default.json").wantProblem(t, http.StatusConflict, "")
		if !strings.Contains(p.Detail, `a default provider_config already exists for vpc/1 ("vpc-v1-default")`) {
			t.Errorf("detail %q", p.Detail)
		}

		// 3) Custom overrides, one per version.
		pc("providerconfig-vpc-v1-custom.json").wantApply(t, "created")
		pc("providerconfig-vpc-v2-custom.json").wantApply(t, "created")

		// 4) A matching custom config attaches.
		var r resource
		b.apply(fixture(t, "resource-vpc-v1-with-custom.json")).wantApply(t, "created").decode(t, &r)
		if r.ProviderConfigRef != "vpc-v1-payments" {
			t.Fatalf("provider_config_ref %q", r.ProviderConfigRef)
		}

		// 5) A v2 config on a v1 resource → 422, and the reverse too.
		p = b.apply(fixture(t, "resource-vpc-v1-config-mismatch.json")).wantProblem(t, http.StatusUnprocessableEntity, "body.provider_config_ref")
		if e, _ := p.at("body.provider_config_ref"); e.Message != `provider_config "vpc-v2-payments" is for vpc/2, not vpc/1` {
			t.Errorf("message %q", e.Message)
		}
		b.apply(`{"kind":"vpc","kind_version":2,"name":"rev","provider_config_ref":"vpc-v1-payments",
			"spec":{"account_id":"123456789012","cidr":"10.9.0.0/16","region":"eu-west-1"}}`).
			wantProblem(t, http.StatusUnprocessableEntity, "body.provider_config_ref")
		if n := b.count(`SELECT count(*) FROM resources WHERE name IN ('sample-vpc-v1-mismatch', 'rev')`); n != 0 {
			t.Errorf("refused applies wrote %d resources", n)
		}
	})
}
