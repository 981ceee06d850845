package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// resourceVPCChanged is resourceVPC with another cidr.
const resourceVPCChanged = `{"kind": "vpc", "kind_version": 1, "name": "sample-vpc", "labels": {"team": "payments"}, "spec": {"cidr": "10.1.0.0/16"}}`

// wantUnchanged checks, through the API, that sample-vpc still has the cidr
// resourceVPC gave it and that new-vpc and the endpoint net do not exist.
func wantUnchanged(t *testing.T, b *testBundle) {
	t.Helper()
	r := b.run(t, "", "get", "resource", "vpc/sample-vpc", "-o", "json")
	wantCode(t, r, ExitOK)
	var got struct {
		Spec struct{ Cidr string } `json:"spec"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Spec.Cidr != "10.0.0.0/16" {
		t.Errorf("sample-vpc's cidr is %q (%v), want it unchanged", got.Spec.Cidr, err)
	}
	wantCode(t, b.run(t, "", "get", "resource", "vpc/new-vpc"), ExitFailure)
	wantCode(t, b.run(t, "", "get", "endpoint", "net"), ExitFailure)
}

// TestApplyDryRunServer: apply --dry-run=server sends every write, batched
// resources included, with dry_run=true, prints what each would do
// followed by "(server dry run)", shows no endpoint secret, reports a
// refusal as apply does, and changes nothing.
func TestApplyDryRunServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedKinds(t)
	b.seed(t, "res", resourceVPC)

	file := b.file(t, "all.json", strings.Join([]string{
		`{"type": "resource", "kind": "vpc", "kind_version": 1, "name": "sample-vpc", "labels": {"team": "payments"}, "spec": {"cidr": "10.1.0.0/16"}}`,
		`{"type": "resource", "kind": "vpc", "kind_version": 1, "name": "new-vpc", "spec": {"cidr": "10.2.0.0/16"}}`,
		`{"type": "endpoint", "name": "net", "target": {"type": "https", "url": "https://x.example/converge"}, "kinds": [{"kind": "vpc", "kind_version": 1}]}`,
		`{"type": "kindconfig", "kind": "vpc", "kind_version": 1, "max_inflight": 7}`,
	}, "\n"))
	r := b.run(t, "", "apply", "-f", file, "--dry-run=server")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "resource/vpc/sample-vpc configured (server dry run)\n"+
		"resource/vpc/new-vpc created (server dry run)\n"+
		"2 resources: 1 created, 1 configured, 0 unchanged, 0 invalid (server dry run)\n"+
		"endpoint/net created (server dry run)\n"+
		"kindconfig/vpc/v1 configured (server dry run)\n")
	if strings.Contains(r.stdout+r.stderr, "secret") {
		t.Errorf("a dry run printed a signing secret or its warning:\n%s\n%s", r.stdout, r.stderr)
	}
	for _, req := range b.api.recorded() {
		if req.Method != http.MethodGet && req.Query.Get("dry_run") != "true" {
			t.Errorf("%s %s was sent without dry_run=true", req.Method, req.Path)
		}
	}
	wantUnchanged(t, b)

	// A refusal is reported as the real apply reports it.
	bad := b.file(t, "bad.json", `{"kind": "vpc", "kind_version": 1, "name": "sample-vpc", "spec": {"cidr": 5}}`)
	dry := b.run(t, "", "apply", "--type", "res", "-f", bad, "--dry-run")
	real := b.run(t, "", "apply", "--type", "res", "-f", bad)
	wantCode(t, dry, ExitFailure)
	wantCode(t, real, ExitFailure)
	wantOutput(t, dry.stderr, real.stderr)

	wantCode(t, b.run(t, "", "apply", "-f", file, "--dry-run=client"), ExitUsage)
	wantCode(t, b.run(t, "", "apply", "-f", file, "--dry-run=yes"), ExitUsage)
	wantUnchanged(t, b)
}

// TestDiff: conctl diff exits 0 and prints nothing for an object as its
// file says, prints a unified diff of the live object against the dry
// run's and exits 1 for one that would change or be created, and exits 2
// for one that cannot be diffed; it changes nothing.
func TestDiff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedKinds(t)
	b.seed(t, "res", resourceVPC)

	same := b.run(t, "", "diff", "--type", "res", "-f", b.file(t, "same.json", resourceVPC))
	wantCode(t, same, ExitNoDiff)
	wantOutput(t, same.stdout, "")
	wantRequests(t, b, "GET /resources/vpc/sample-vpc", "POST /resources?dry_run=true")
	b.api.forget()

	changed := b.run(t, "", "diff", "--type", "res", "-f", b.file(t, "changed.json", resourceVPCChanged))
	wantCode(t, changed, ExitDiffFound)
	for _, want := range []string{
		"--- live/resource/vpc/sample-vpc\n+++ dry-run/resource/vpc/sample-vpc\n",
		"-generation: 1\n+generation: 2\n",
		"-  cidr: 10.0.0.0/16\n+  cidr: 10.1.0.0/16\n",
	} {
		if !strings.Contains(changed.stdout, want) {
			t.Errorf("the diff has no %q:\n%s", want, changed.stdout)
		}
	}
	if strings.Contains(changed.stdout, "resource_version") || strings.Contains(changed.stdout, "conditions") {
		t.Errorf("the diff shows a member it leaves out:\n%s", changed.stdout)
	}

	created := b.run(t, "", "diff", "-o", "json", "--type", "res", "-f", b.file(t, "new.json",
		`{"kind": "vpc", "kind_version": 1, "name": "new-vpc", "spec": {"cidr": "10.2.0.0/16"}}`))
	wantCode(t, created, ExitDiffFound)
	for _, line := range strings.Split(strings.TrimSpace(created.stdout), "\n")[3:] {
		if !strings.HasPrefix(line, "+") {
			t.Errorf("a created object's diff has a line that is not added: %q\n%s", line, created.stdout)
		}
	}
	if !strings.Contains(created.stdout, `+    "cidr": "10.2.0.0/16"`) {
		t.Errorf("the JSON diff has no cidr:\n%s", created.stdout)
	}

	// One object that cannot be diffed makes the status 2, whatever the
	// others show.
	mixed := b.run(t, "", "diff", "--type", "res", "-f", b.file(t, "mixed.json",
		resourceVPCChanged+`{"kind": "vpc", "kind_version": 1, "name": "bad", "spec": {"cidr": 5}}`))
	wantCode(t, mixed, ExitDiffError)
	if !strings.Contains(mixed.stderr, "resource/vpc/bad") || !strings.Contains(mixed.stdout, "+++ dry-run/resource/vpc/sample-vpc") {
		t.Errorf("want the diff of sample-vpc and the error of bad:\nstdout: %s\nstderr: %s", mixed.stdout, mixed.stderr)
	}
	wantCode(t, b.run(t, "", "diff", "-f", b.file(t, "notype.json", resourceVPC)), ExitDiffError)
	wantCode(t, b.run(t, "", "diff"), ExitUsage)
	wantUnchanged(t, b)
}
