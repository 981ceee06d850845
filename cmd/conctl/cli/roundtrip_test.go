package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/convergeplane/converge/webhooksdk"
)

// TestRoundTrip is docs/conctl.md's promise: what `conctl get -o yaml` (or
// -o json) prints, `conctl apply -f` takes back, for every object type,
// the fields the server sets (status, conditions, the task, created_at,
// ...) accepted and ignored. Applied back unchanged, each is "unchanged".
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedKinds(t)
	b.seed(t, "res", resourceVPC)
	b.seed(t, "pc", "name: cfg\nkind: vpc\nkind_version: 1\nis_default: true\nspec: {}\ndata: aGk=\n")
	b.seed(t, "rb", "name: bind\nwatch_kind: vpc\ntransition: synced\nreactor: statussink\nlabel_match: {team: payments}\nenabled: true\n")
	b.seed(t, "ep", "name: net\ntarget: {type: https, url: 'https://x/converge'}\nkinds: [{kind: vpc, kind_version: 1}]\nenabled: true\n")
	b.seed(t, "config", "kind: vpc\nkind_version: 1\nmax_inflight: 10\n")
	b.seed(t, "sink", "name: oncall\nsink_type: sqs\ntarget: 'https://sqs.eu-west-1.amazonaws.com/123456789012/alerts'\nevent_types: [kind.parked]\n")
	// The resource as a provider leaves it: a status, a condition, a last
	// task, the binding's reaction pending; then a reconcile queues a task.
	complete(t, b, claim(t, b, "vpc/1", 1)[0], webhooksdk.Result{Outcome: &webhooksdk.Outcome{
		Status:     []byte(`{"vpc_id": "vpc-123"}`),
		Conditions: []webhooksdk.Condition{{Type: "Healthy", Status: "True", Reason: "Probed"}}}})
	wantCode(t, b.run(t, "", "reconcile", "vpc/sample-vpc"), ExitOK)

	for _, tc := range []struct {
		typ      string
		args     []string
		id       string
		readOnly []string // fields the GET answer must hold, to show they are ignored
	}{
		{"resource", []string{"vpc/sample-vpc"}, "resource/vpc/sample-vpc",
			[]string{"id", "status", "conditions", "last_task", "task", "pending_reactions", "phase", "created_at"}},
		{"manifest", []string{"vpc", "--kind-version", "1"}, "manifest/vpc/v1", nil},
		{"kindconfig", []string{"vpc", "--kind-version", "1"}, "kindconfig/vpc/v1", []string{"updated_at"}},
		{"providerconfig", []string{"cfg"}, "providerconfig/cfg", []string{"created_at", "updated_at"}},
		{"reactorbinding", []string{"bind"}, "reactorbinding/bind", []string{"created_at", "updated_at"}},
		{"endpoint", []string{"net"}, "endpoint/net", []string{"created_at", "updated_at"}},
		{"alertsink", []string{"oncall"}, "alertsink/oncall", []string{"created_at", "updated_at"}},
	} {
		for _, format := range []string{"yaml", "json"} {
			t.Run(tc.typ+"/"+format, func(t *testing.T) {
				r := b.run(t, "", append([]string{"get", tc.typ, "-o", format}, tc.args...)...)
				wantCode(t, r, ExitOK)
				got := map[string]any{}
				if err := yamlOrJSON(format, r.stdout, &got); err != nil {
					t.Fatal(err)
				}
				for _, f := range tc.readOnly {
					if _, ok := got[f]; !ok {
						t.Errorf("the GET answer has no %q, so this test does not show it is ignored", f)
					}
				}
				r = b.run(t, "", "apply", "--type", tc.typ, "-f", b.file(t, tc.typ+"."+format, r.stdout))
				wantCode(t, r, ExitOK)
				wantOutput(t, r.stdout, tc.id+" unchanged\n")
			})
		}
	}

	t.Run("EditedAndAppliedBack", func(t *testing.T) {
		r := b.run(t, "", "get", "resource", "vpc/sample-vpc", "-o", "yaml")
		wantCode(t, r, ExitOK)
		edited := strings.Replace(r.stdout, "cidr: 10.0.0.0/16", "cidr: 10.1.0.0/16", 1)
		if edited == r.stdout {
			t.Fatalf("no cidr to edit in:\n%s", r.stdout)
		}
		r = b.run(t, "", "apply", "--type", "resource", "-f", b.file(t, "edited.yaml", edited))
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "resource/vpc/sample-vpc configured\n")
	})

	t.Run("UnknownFieldsAreStillRefused", func(t *testing.T) {
		r := b.run(t, "", "apply", "--type", "resource", "-f", b.file(t, "typo.yaml",
			"kind: vpc\nkind_version: 1\nname: sample-vpc\nspec: {cidr: 10.1.0.0/16}\nlables: {team: x}\n"))
		wantCode(t, r, ExitFailure)
		if !strings.Contains(r.stderr, `unknown field "lables"`) {
			t.Errorf("stderr = %q, want the unknown field named", r.stderr)
		}
	})
}

func yamlOrJSON(format, text string, v any) error {
	if format == "json" {
		return json.Unmarshal([]byte(text), v)
	}
	return yaml.Unmarshal([]byte(text), v)
}
