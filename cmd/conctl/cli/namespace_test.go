package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// resourceIn is resourceVPC naming the namespace ns.
func resourceIn(ns string) string {
	return `{"namespace": "` + ns + `", "kind": "vpc", "kind_version": 1, "name": "sample-vpc", "spec": {"cidr": "10.0.0.0/16"}}`
}

// namespaceOfResource reads the namespace of `get resource -o json`.
func namespaceOfResource(t *testing.T, r result) string {
	t.Helper()
	wantCode(t, r, ExitOK)
	var o struct {
		Namespace string `json:"namespace"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
		t.Fatalf("get -o json: %v\n%s", err, r.stdout)
	}
	return o.Namespace
}

// TestNamespaces: against a real server, the same resource name lives in
// two namespaces; -n, $CONVERGE_NAMESPACE, the context's namespace and a
// manifest's namespace choose which, -A lists both with a NAMESPACE
// column, and the namespace commands create, list, complete and delete
// namespaces.
func TestNamespaces(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedKinds(t)

	t.Log("create namespace: team-a plain, team-b with quotas; again is an error")
	r := b.run(t, "", "create", "namespace", "team-a")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "namespace/team-a created\n")
	wantCode(t, b.run(t, "", "create", "ns", "team-b", "--max-objects", "100", "--max-in-flight", "5", "--label", "owner=payments"), ExitOK)
	r = b.run(t, "", "create", "namespace", "team-a")
	wantCode(t, r, ExitFailure)
	wantOutput(t, r.stderr, "Error: namespace \"team-a\" already exists\n")

	r = b.run(t, "", "get", "namespaces")
	wantCode(t, r, ExitOK)
	wantOutput(t, tableFields(r.stdout), "NAME OBJECTS MAX_OBJECTS MAX_IN_FLIGHT LABELS AGE\n"+
		"default 0 - - <none> 60m\n"+
		"team-a 0 - - <none> 60m\n"+
		"team-b 0 100 5 owner=payments 60m\n")
	r = b.run(t, "", "get", "namespace", "team-b", "-o", "jsonpath={.max_objects}/{.max_in_flight}")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "100/5")

	t.Log("apply: -n, and a manifest's own namespace")
	b.api.forget()
	r = b.run(t, "", "apply", "--type", "res", "-n", "team-a", "-f", b.file(t, "a.json", resourceVPC))
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "resource/vpc/sample-vpc created\n")
	wantRequests(t, b, "POST /resources?namespace=team-a")
	fileB := b.file(t, "b.yaml", resourceIn("team-b"))
	b.api.forget()
	wantCode(t, b.run(t, "", "apply", "--type", "res", "-f", fileB), ExitOK)
	wantRequests(t, b, "POST /resources?namespace=team-b")

	t.Log("a manifest's namespace that disagrees with -n is an error naming the file; nothing is sent")
	b.api.forget()
	r = b.run(t, "", "apply", "--type", "res", "-n", "team-a", "-f", fileB)
	wantCode(t, r, ExitFailure)
	wantOutput(t, r.stderr, "Error: resource/vpc/sample-vpc from "+fileB+
		": its namespace \"team-b\" disagrees with --namespace \"team-a\": drop one, or make them agree\n")
	r = b.run(t, "", "diff", "--type", "res", "-f", fileB, "-n", "team-a")
	wantCode(t, r, ExitDiffError)
	if !strings.Contains(r.stderr, fileB) || !strings.Contains(r.stderr, `disagrees with --namespace "team-a"`) {
		t.Errorf("diff's stderr = %q, want the file and the disagreement", r.stderr)
	}
	wantRequests(t, b)

	t.Log("a batch splits where the namespace changes")
	batch := b.file(t, "batch.json", "["+resourceIn("team-a")+","+
		strings.Replace(resourceIn("team-a"), "sample-vpc", "second", 1)+","+
		strings.Replace(resourceIn("team-b"), "sample-vpc", "second", 1)+","+
		strings.Replace(resourceIn("team-b"), "sample-vpc", "third", 1)+"]")
	b.api.forget()
	wantCode(t, b.run(t, "", "apply", "--type", "res", "-f", batch), ExitOK)
	wantRequests(t, b, "POST /resources:batch?namespace=team-a", "POST /resources:batch?namespace=team-b")

	t.Log("get: -n, then $CONVERGE_NAMESPACE, then the context's namespace")
	if got := namespaceOfResource(t, b.run(t, "", "get", "res", "vpc/sample-vpc", "-n", "team-b", "-o", "json")); got != "team-b" {
		t.Errorf("-n team-b: namespace = %q", got)
	}
	cfg := filepath.Join(b.dir, "conf", "config.yaml")
	b.env[EnvConfig] = cfg
	wantCode(t, b.run(t, "", "config", "set-context", "a", "--server", b.api.url, "--namespace", "team-a", "--current"), ExitOK)
	if got := namespaceOfResource(t, b.run(t, "", "get", "res", "vpc/sample-vpc", "-o", "json")); got != "team-a" {
		t.Errorf("the context's team-a: namespace = %q", got)
	}
	b.env[EnvNamespace] = "team-b"
	if got := namespaceOfResource(t, b.run(t, "", "get", "res", "vpc/sample-vpc", "-o", "json")); got != "team-b" {
		t.Errorf("$CONVERGE_NAMESPACE team-b over the context: namespace = %q", got)
	}
	if got := namespaceOfResource(t, b.run(t, "", "get", "res", "vpc/sample-vpc", "-n", "team-a", "-o", "json")); got != "team-a" {
		t.Errorf("-n team-a over $CONVERGE_NAMESPACE: namespace = %q", got)
	}
	delete(b.env, EnvNamespace)
	// The context's namespace is not a choice made for this command: a
	// manifest's own wins over it.
	b.api.forget()
	wantCode(t, b.run(t, "", "apply", "--type", "res", "-f", fileB), ExitOK)
	wantRequests(t, b, "POST /resources?namespace=team-b")
	// Naming default is naming it, though default goes unnamed when
	// nothing else is chosen.
	b.api.forget()
	r = b.run(t, "", "apply", "--dry-run=server", "--type", "res", "-f", b.file(t, "default.json", resourceIn("default")))
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "resource/vpc/sample-vpc created (server dry run)\n")
	wantRequests(t, b, "POST /resources?dry_run=true&namespace=default")
	r = b.run(t, "", "config", "get-contexts")
	wantCode(t, r, ExitOK)
	wantOutput(t, tableFields(r.stdout), "CURRENT NAME SERVER AUTH CA NAMESPACE\n* a "+b.api.url+" none <none> team-a\n")
	delete(b.env, EnvConfig)

	t.Log("list: the default namespace holds none; -A lists both, with a NAMESPACE column")
	r = b.run(t, "", "list", "res")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stderr, "No resources found.\n")
	r = b.run(t, "", "list", "res", "-A", "-o", "jsonpath={range .items[*]}{.namespace}/{.name} {end}")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "team-a/sample-vpc team-b/sample-vpc team-a/second team-b/second team-b/third ")
	r = b.run(t, "", "list", "res", "--all-namespaces", "--kind", "vpc")
	wantCode(t, r, ExitOK)
	var rows []string
	for line := range strings.Lines(tableFields(r.stdout)) {
		f := strings.Fields(line)
		rows = append(rows, strings.Join(f[:4], " "))
	}
	wantOutput(t, strings.Join(rows, "\n"), "NAMESPACE KIND VERSION NAME\n"+
		"team-a vpc 1 sample-vpc\nteam-b vpc 1 sample-vpc\n"+
		"team-a vpc 1 second\nteam-b vpc 1 second\nteam-b vpc 1 third")
	r = b.run(t, "", "list", "res", "-n", "team-a", "-o", "name")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "resource/vpc/sample-vpc\nresource/vpc/second\n")

	t.Log("completion of namespace names")
	r = b.run(t, "", "__complete", "list", "res", "-n", "team-")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "team-a\nteam-b\n:4\n")
	r = b.run(t, "", "__complete", "delete", "namespace", "d")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "default\n:4\n")

	t.Log("errors: a namespace that does not exist; deleting one that holds objects, or default")
	r = b.run(t, "", "list", "res", "-n", "nope")
	wantCode(t, r, ExitFailure)
	if !strings.Contains(r.stderr, "nope") || !strings.Contains(r.stderr, "404") {
		t.Errorf("-n nope: stderr = %q, want a 404 naming nope", r.stderr)
	}
	r = b.run(t, "", "delete", "namespace", "team-a")
	wantCode(t, r, ExitFailure)
	if !strings.Contains(r.stderr, "409") {
		t.Errorf("delete namespace team-a (holding resources): stderr = %q, want a 409", r.stderr)
	}
	wantCode(t, b.run(t, "", "delete", "namespace", "default"), ExitFailure)
	wantCode(t, b.run(t, "", "create", "namespace", "empty"), ExitOK)
	r = b.run(t, "", "delete", "namespace", "empty")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "namespace/empty deleted\n")
	r = b.run(t, "", "get", "namespace", "empty")
	wantCode(t, r, ExitFailure)
}

// TestNamespaceUsageErrors: a namespace name the server would refuse, "*"
// as -n, and -A where nothing is namespaced are refused before any
// request.
func TestNamespaceUsageErrors(t *testing.T) {
	t.Parallel()
	b := setupNoAPI(t)
	for _, tt := range []struct {
		name   string
		env    map[string]string
		args   []string
		stderr string
	}{
		{"BadFlag", nil, []string{"list", "res", "-n", "Team_A"},
			"Error: invalid --namespace \"Team_A\": a namespace name is 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit\n"},
		{"StarFlag", nil, []string{"list", "res", "-n", "*"},
			"Error: invalid --namespace \"*\": pass -A (--all-namespaces) to list every namespace\n"},
		{"BadEnvironment", map[string]string{EnvNamespace: "-x"}, []string{"get", "res", "vpc/a"},
			"Error: invalid $CONVERGE_NAMESPACE \"-x\": a namespace name is 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit\n"},
		{"BadCreate", nil, []string{"create", "namespace", "a.b"},
			"Error: invalid namespace name \"a.b\": a namespace name is 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit\n"},
		{"NegativeQuota", nil, []string{"create", "namespace", "a", "--max-objects", "-1"},
			"Error: invalid --max-objects -1: must not be negative\n"},
		{"AllOnClusterWide", nil, []string{"list", "kinds", "-A"},
			"Error: unknown shorthand flag: 'A' in -A\n"},
		{"BadContextNamespace", nil, []string{"config", "set-context", "x", "--namespace", "X"},
			"Error: invalid --namespace \"X\": a namespace name is 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b.env = map[string]string{EnvServer: b.api.url, EnvConfig: filepath.Join(b.dir, "config.yaml")}
			for k, v := range tt.env {
				b.env[k] = v
			}
			r := b.run(t, "", tt.args...)
			wantCode(t, r, ExitUsage)
			first, _, _ := strings.Cut(r.stderr, "Run '")
			wantOutput(t, first, tt.stderr)
		})
	}

	t.Run("ManifestDisagreesWithEnvironment", func(t *testing.T) {
		b.env = map[string]string{EnvServer: b.api.url, EnvNamespace: "team-a"}
		f := b.file(t, "b.json", resourceIn("team-b"))
		r := b.run(t, "", "apply", "--type", "res", "-f", f)
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: resource/vpc/sample-vpc from "+f+
			": its namespace \"team-b\" disagrees with $CONVERGE_NAMESPACE \"team-a\": drop one, or make them agree\n")
	})
}
