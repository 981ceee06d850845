package cli

import (
	"strings"
	"testing"
)

// TestObjectFormats: get and list print -o name, wide, jsonpath=… and
// go-template=… against the real API.
func TestObjectFormats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedKinds(t)
	b.seed(t, "res", "["+resourceVPC+`, {"kind": "vpc", "kind_version": 1, "name": "other", "spec": {"cidr": "10.9.0.0/16"}}]`)

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"ListName", []string{"list", "res", "-o", "name"}, "resource/vpc/sample-vpc\nresource/vpc/other\n"},
		{"GetName", []string{"get", "manifest", "vpc", "--kind-version", "1", "-o", "name"}, "manifest/vpc/v1\n"},
		{"ListWide", []string{"list", "res", "-o", "wide", "-l", "team=payments"},
			"KIND VERSION NAME PHASE GEN SYNCED AGE LABELS OWNER PROVIDER_CONFIG LAST_ERROR\n" +
				"vpc 1 sample-vpc Reconciling 1 0 60m team=payments <none> <none> <none>\n"},
		{"GetJSONPath", []string{"get", "res", "vpc/sample-vpc", "-o", "jsonpath={.spec.cidr} {.labels.team}"}, "10.0.0.0/16 payments"},
		{"ListJSONPathAll", []string{"list", "res", "-o", "jsonpath={.items[*].name}"}, "sample-vpc other"},
		{"ListJSONPathRange", []string{"list", "res", "-o", `jsonpath={range .items[*]}{.kind}/{.name}: {.spec.cidr}{"\n"}{end}`},
			"vpc/sample-vpc: 10.0.0.0/16\nvpc/other: 10.9.0.0/16\n"},
		{"ListJSONPathFilter", []string{"list", "res", "-o", `jsonpath={$.items[?@.labels.team=="payments"].name}`}, "sample-vpc"},
		{"GetGoTemplate", []string{"get", "res", "vpc/sample-vpc", "-o", "go-template={{.name}} gen {{.generation}}"}, "sample-vpc gen 1"},
		{"ListGoTemplate", []string{"list", "res", "-o", `go-template={{range .items}}{{.name}}={{.phase}}{{"\n"}}{{end}}`},
			"sample-vpc=Reconciling\nother=Reconciling\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := b.run(t, "", tt.args...)
			wantCode(t, r, ExitOK)
			got := r.stdout
			if strings.Contains(tt.name, "Wide") {
				got = tableFields(got)
			}
			wantOutput(t, got, tt.want)
		})
	}
}

// TestObjectFormatErrors: a template that does not parse, or a format the
// command does not print, is a usage error naming --output, and nothing is
// sent.
func TestObjectFormatErrors(t *testing.T) {
	t.Parallel()
	b := setupNoAPI(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "res", "a/b", "-o", "jsonpath={.items[*].name"}, `Error: invalid --output jsonpath template "{.items[*].name": unclosed {`},
		{[]string{"list", "res", "-o", "jsonpath={range .items[*]}{.name}"}, `Error: invalid --output jsonpath template "{range .items[*]}{.name}": {range} without {end}`},
		{[]string{"list", "res", "-o", "jsonpath={.a[}"}, `Error: invalid --output jsonpath template "{.a[}": `},
		{[]string{"list", "res", "-o", "go-template={{.name"}, `Error: invalid --output go-template template "{{.name": template: output:1: unclosed action`},
		{[]string{"list", "res", "-o", "jsonpath="}, `Error: invalid --output "jsonpath=": want jsonpath=TEMPLATE`},
		{[]string{"list", "res", "-o", "wide=x"}, `Error: invalid --output "wide=x": wide takes no template`},
		{[]string{"list", "res", "-o", "csv"}, `Error: invalid --output "csv": want one of table, wide, json, yaml, name, jsonpath=TEMPLATE, go-template=TEMPLATE`},
		{[]string{"apply", "-f", "x.json", "-o", "name"}, `Error: invalid --output "name": this command prints table, json, yaml; get, list, describe and deliveries print the others`},
	} {
		r := b.run(t, "", tt.args...)
		wantCode(t, r, ExitUsage)
		if !strings.HasPrefix(r.stderr, tt.want) {
			t.Errorf("%v: stderr = %q, want it to start %q", tt.args, r.stderr, tt.want)
		}
	}
}
