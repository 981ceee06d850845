package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// testBundle is conctl pointed at a real API (see startAPI) on a private
// database, with a temp dir for the files it applies.
type testBundle struct {
	api *realAPI
	env map[string]string
	dir string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupWith(t, apiOptions{})
}

func setupWith(t *testing.T, opts apiOptions) *testBundle {
	t.Helper()
	return bundleFor(t, startAPI(t, opts))
}

// setupNoAPI is setup for a test where conctl must send no request: any
// request fails the test.
func setupNoAPI(t *testing.T) *testBundle {
	t.Helper()
	return bundleFor(t, startNoAPI(t))
}

func bundleFor(t *testing.T, a *realAPI) *testBundle {
	t.Helper()
	return &testBundle{api: a, env: map[string]string{EnvServer: a.url}, dir: t.TempDir()}
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs conctl with args, stdin and the bundle's environment, with its
// clock an hour ahead, so objects created by the test are 60m old.
func (b *testBundle) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	now := func() time.Time { return time.Now().Add(time.Hour) }
	code := run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr,
		func(k string) string { return b.env[k] }, now)
	t.Logf("conctl %s -> %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return result{stdout.String(), stderr.String(), code}
}

// file writes a file into the bundle's temp dir and returns its path.
func (b *testBundle) file(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(b.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status = %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
}

func wantOutput(t *testing.T, got, want string) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("output mismatch (-want +got):\n%s", diff)
	}
}

// jsonEqual compares two JSON texts semantically.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got invalid JSON %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want invalid JSON %q: %v", want, err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("JSON mismatch (-want +got):\n%s", diff)
	}
}

// listedNames reads a list's -o json output: its items' names, joined by
// commas.
func listedNames(t *testing.T, out string) string {
	t.Helper()
	var got struct {
		Items []struct {
			Name string `json:"name"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(got.Items))
	for i, it := range got.Items {
		names[i] = it.Name
	}
	return strings.Join(names, ",")
}

// requestLines renders recorded requests as "METHOD path?query" lines.
func requestLines(reqs []recordedRequest) []string {
	var out []string
	for _, r := range reqs {
		line := r.Method + " " + r.Path
		if len(r.Query) > 0 {
			line += "?" + r.Query.Encode()
		}
		out = append(out, line)
	}
	return out
}

func wantRequests(t *testing.T, b *testBundle, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, requestLines(b.api.recorded())); diff != "" {
		t.Errorf("requests mismatch (-want +got):\n%s", diff)
	}
}

// manifestVPC1 publishes vpc/1. Its reactions leave its resources
// Reconciling (no provider serves them here).
const manifestVPC1 = `{
  "kind": "vpc",
  "kind_version": 1,
  "description": "vpc/v1 — a network",
  "spec_schema": {"type": "object", "properties": {"cidr": {"type": "string"}}},
  "reactions": [{"name": "work", "trigger": "specChange", "emits": ["status"]},
                {"name": "teardown", "trigger": "deleteRequested", "emits": ["finalizer"], "finalizer": "vpc"}]
}`

// manifestStatusSink publishes a reactor kind, for reactor bindings.
const manifestStatusSink = `{"kind": "statussink", "kind_version": 1,
  "config_schema": {"type": "object", "properties": {"endpoint": {"type": "string"}}},
  "reactions": [{"name": "react", "trigger": "reactor", "emits": ["sideEffect"]}]}`

const resourceVPC = `{"kind": "vpc", "kind_version": 1, "name": "sample-vpc", "labels": {"team": "payments"}, "spec": {"cidr": "10.0.0.0/16"}}`

func TestApply(t *testing.T) {
	t.Parallel()

	t.Run("JSONManifestWithTypeFlag", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.run(t, "", "apply", "--type", "manifest", "-f", b.file(t, "vpc.kind.json", manifestVPC1))
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "manifest/vpc/v1 created\n")
		wantRequests(t, b, "PUT /kinds/vpc/manifest")
		req := b.api.recorded()[0]
		jsonEqual(t, req.Body, manifestVPC1)
		if ct := req.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
	})

	t.Run("CreatedUnchangedConfigured", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		f := b.file(t, "vpc.json", resourceVPC)
		wantOutput(t, b.run(t, "", "apply", "--type", "resource", "-f", f).stdout, "resource/vpc/sample-vpc created\n")
		wantOutput(t, b.run(t, "", "apply", "--type", "res", "-f", f).stdout, "resource/vpc/sample-vpc unchanged\n")
		f2 := b.file(t, "vpc2.json", strings.Replace(resourceVPC, "10.0.0.0/16", "10.1.0.0/16", 1))
		r := b.run(t, "", "apply", "--type", "resources", "-f", f2)
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "resource/vpc/sample-vpc configured\n")
		wantRequests(t, b, "POST /resources", "POST /resources", "POST /resources")
	})

	t.Run("YAMLFile", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		f := b.file(t, "vpc.yaml", `# a v1 vpc
kind: vpc
kind_version: 1
name: sample-vpc
labels:
  team: payments
spec:
  cidr: 10.0.0.0/16
  tags: [a, b]
  size: 3
`)
		r := b.run(t, "", "apply", "--type", "resource", "-f", f)
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "resource/vpc/sample-vpc created\n")
		jsonEqual(t, b.api.recorded()[0].Body, `{"kind":"vpc","kind_version":1,"name":"sample-vpc",
			"labels":{"team":"payments"},"spec":{"cidr":"10.0.0.0/16","tags":["a","b"],"size":3}}`)
	})

	t.Run("MultiDocumentYAMLTypeFieldsRouteAndAreStripped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestStatusSink) // the binding's reactor
		f := b.file(t, "all.yaml", `---
type: manifest
kind: vpc
kind_version: 1
reactions: [{name: work, trigger: specChange, emits: [status]}]
---
# comments only: not a document
---
type: pc
name: vpc-v1-default
kind: vpc
kind_version: 1
is_default: true
spec: {flow_logs_bucket: logs}
---
type: rb
name: vpc-synced
watch_kind: vpc
transition: synced
reactor: statussink
enabled: true
---
type: resource
kind: vpc
kind_version: 1
name: sample-vpc
spec: {cidr: 10.0.0.0/16}
`)
		r := b.run(t, "", "apply", "-f", f)
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, `manifest/vpc/v1 created
providerconfig/vpc-v1-default created
reactorbinding/vpc-synced created
resource/vpc/sample-vpc created
`)
		wantRequests(t, b, "PUT /kinds/vpc/manifest", "POST /providerconfigs", "POST /reactor-bindings", "POST /resources")
		for _, req := range b.api.recorded() {
			if bytes.Contains(req.Body, []byte(`"type"`)) {
				t.Errorf("%s %s: the type field was sent: %s", req.Method, req.Path, req.Body)
			}
		}
		jsonEqual(t, b.api.recorded()[1].Body, `{"name":"vpc-v1-default","kind":"vpc","kind_version":1,
			"is_default":true,"spec":{"flow_logs_bucket":"logs"}}`)
	})

	t.Run("JSONArrayAndConcatenatedObjects", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		arr := b.file(t, "arr.json", `[`+strings.Replace(resourceVPC, "sample-vpc", "a", 1)+`,`+
			strings.Replace(resourceVPC, "sample-vpc", "b", 1)+`]`)
		stream := b.file(t, "stream.json", strings.Replace(resourceVPC, "sample-vpc", "c", 1)+"\n"+
			strings.Replace(resourceVPC, "sample-vpc", "d", 1))
		r := b.run(t, "", "apply", "--type", "resource", "-f", arr, "-f", stream)
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "resource/vpc/a created\nresource/vpc/b created\nresource/vpc/c created\nresource/vpc/d created\n"+
			"4 resources: 4 created, 0 configured, 0 unchanged, 0 invalid\n")
		// The four resources, one run across both files, are one batch.
		wantRequests(t, b, "POST /resources:batch")
	})

	t.Run("NDJSONStdinGoesThroughTheBatchInChunks", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, apiOptions{batchMaxItems: 2})
		b.seedKinds(t)
		var lines []string
		for _, name := range []string{"n0", "n1", "n2", "n3", "n4"} {
			lines = append(lines, strings.Replace(resourceVPC, "sample-vpc", name, 1))
		}
		lines[2] = strings.Replace(lines[2], `"10.0.0.0/16"`, `5`, 1) // cidr must be a string
		r := b.run(t, strings.Join(lines, "\n")+"\n", "apply", "--type", "resource", "-f", "-")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stdout, "resource/vpc/n0 created\nresource/vpc/n1 created\nresource/vpc/n3 created\nresource/vpc/n4 created\n"+
			"5 resources: 4 created, 0 configured, 0 unchanged, 1 invalid\n")
		if !strings.Contains(r.stderr, "resource/vpc/n2 from stdin") || !strings.Contains(r.stderr, "body.spec.cidr") ||
			!strings.Contains(r.stderr, "1 of 5 objects failed") {
			t.Errorf("stderr = %q", r.stderr)
		}
		// 5 items over a limit of 2: refused (413), halved to 3, refused,
		// halved to 2, then 2, 2 and 1.
		var got []string
		for _, req := range b.api.recorded() {
			got = append(got, fmt.Sprintf("%s %s %d", req.Method, req.Path, req.Status))
		}
		want := []string{"POST /resources:batch 413", "POST /resources:batch 413", "POST /resources:batch 200",
			"POST /resources:batch 200", "POST /resources:batch 200"}
		if !slices.Equal(got, want) {
			t.Errorf("requests %q, want %q", got, want)
		}
		// Applied again: all unchanged but the invalid one.
		r = b.run(t, strings.Join(lines, "\n"), "apply", "--type", "resource", "-f", "-")
		wantCode(t, r, ExitFailure)
		if !strings.HasSuffix(r.stdout, "5 resources: 0 created, 0 configured, 4 unchanged, 1 invalid\n") {
			t.Errorf("stdout = %q", r.stdout)
		}
	})

	t.Run("Stdin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		r := b.run(t, "type: pc\nname: cfg\nkind: vpc\nkind_version: 1\nspec: {}\n", "apply", "-f", "-")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "providerconfig/cfg created\n")
		wantRequests(t, b, "POST /providerconfigs")
	})

	t.Run("StdinTwiceIsUsageError", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		r := b.run(t, resourceVPC, "apply", "--type", "res", "-f", "-", "-f", "-")
		wantCode(t, r, ExitUsage)
		wantRequests(t, b)
	})

	t.Run("Directory", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.file(t, "kinds/b.yaml", "kind: b\nkind_version: 1\nreactions: []\n")
		b.file(t, "kinds/a.json", `{"kind": "a", "kind_version": 2, "reactions": []}`)
		b.file(t, "kinds/README.md", "not a manifest")
		r := b.run(t, "", "apply", "--type", "crd", "-f", filepath.Join(b.dir, "kinds"))
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "manifest/a/v2 created\nmanifest/b/v1 created\n")
	})

	t.Run("TypeFieldWinsWhenFlagAgrees", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		f := b.file(t, "x.json", `{"type": "resources", `+resourceVPC[1:])
		r := b.run(t, "", "apply", "--type", "res", "-f", f)
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "resource/vpc/sample-vpc created\n")
	})

	t.Run("TypeFieldConflictingWithFlagFailsThatDocumentOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		f := b.file(t, "x.yaml", "type: manifest\nkind: vpc\nkind_version: 1\n---\n"+
			"kind: vpc\nkind_version: 1\nname: ok\nspec: {}\n")
		r := b.run(t, "", "apply", "--type", "resource", "-f", f)
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stdout, "resource/vpc/ok created\n")
		if !strings.Contains(r.stderr, `x.yaml (document 1): the "type" field says manifest but --type says resource`) {
			t.Errorf("stderr = %q", r.stderr)
		}
	})

	t.Run("NoTypeAnywhere", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		r := b.run(t, "", "apply", "-f", b.file(t, "x.json", resourceVPC))
		wantCode(t, r, ExitFailure)
		if !strings.Contains(r.stderr, `no type: add a top-level "type" field or pass --type`) {
			t.Errorf("stderr = %q", r.stderr)
		}
		wantRequests(t, b)
	})

	t.Run("UnknownTypeFieldValue", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		r := b.run(t, "", "apply", "-f", b.file(t, "x.json", `{"type": "widget", "name": "w"}`))
		wantCode(t, r, ExitFailure)
		if !strings.Contains(r.stderr, `unknown type "widget"`) {
			t.Errorf("stderr = %q", r.stderr)
		}
	})

	t.Run("ProblemDetailAndPartialFailure", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		// A breaking change to the published vpc/1: a new required
		// property, and cidr removed.
		breaking := strings.Replace(manifestVPC1,
			`"properties": {"cidr": {"type": "string"}}`,
			`"properties": {"region": {"type": "string"}}, "required": ["region"]`, 1)
		f := b.file(t, "mixed.json", `[{"type": "manifest", `+breaking[1:]+`,
			{"type": "resource", "kind": "vpc", "kind_version": 1, "name": "after", "spec": {}}]`)
		r := b.run(t, "", "apply", "-f", f)
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stdout, "resource/vpc/after created\n")
		wantOutput(t, r.stderr, `Error: manifest/vpc/v1 from `+f+` (document 1): 409 Conflict: breaking schema change to the published manifest vpc/1; publish it as a new kind_version (e.g. 2) instead
  - body.spec_schema.properties.cidr: property removed; existing documents may still set it
  - body.spec_schema.properties.region: newly required
Error: 1 of 2 objects failed
`)
	})

	t.Run("ServerValidationError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		r := b.run(t, "", "apply", "--type", "resource", "-f", b.file(t, "x.json", `{"kind": "vpc", "name": "n", "spec": {}}`))
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: resource/vpc/n from "+filepath.Join(b.dir, "x.json")+": 422 Unprocessable Entity: body.kind_version is required: an integer in 1..32767 (there is no default)\n")
	})

	t.Run("UnparsableDocumentOthersStillApplied", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		f := b.file(t, "x.yaml", "kind: vpc\nkind_version: 1\nname: a\n---\nkind: [unclosed\n---\n- not\n- objects\n---\n"+
			"kind: vpc\nkind_version: 1\nname: b\n")
		r := b.run(t, "", "apply", "--type", "resource", "-f", f)
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stdout, "resource/vpc/a created\nresource/vpc/b created\n")
		for _, want := range []string{"(document 2): cannot parse YAML", "(document 3): document is not an object",
			"(document 4): document is not an object", "Error: 3 of 5 objects failed"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
		}
	})

	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		ok := b.file(t, "ok.json", resourceVPC)
		r := b.run(t, "", "apply", "--type", "res", "-f", filepath.Join(b.dir, "nope.json"), "-f", ok)
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stdout, "resource/vpc/sample-vpc created\n")
		if !strings.Contains(r.stderr, "nope.json: cannot read file") {
			t.Errorf("stderr = %q", r.stderr)
		}
	})

	t.Run("EndpointSecretShownOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		f := b.file(t, "ep.yaml", `name: networking
kinds: [{kind: vpc, kind_version: 1}, {kind: vpc, kind_version: 2}]
target: {type: https, url: "https://net.internal:8443/converge"}
enabled: true
`)
		r := b.run(t, "", "apply", "--type", "ep", "-f", f)
		wantCode(t, r, ExitOK)
		secret := answerSecret(t, b.api.recorded()[0])
		wantOutput(t, r.stdout, "endpoint/networking created\n\n  signing secret: "+secret+"\n\n")
		wantOutput(t, r.stderr, "WARNING: the signing secret of endpoint/networking is shown only this once and cannot be retrieved again. Store it now.\n")
		jsonEqual(t, b.api.recorded()[0].Body, `{"name":"networking","enabled":true,
			"kinds":[{"kind":"vpc","kind_version":1},{"kind":"vpc","kind_version":2}],
			"target":{"type":"https","url":"https://net.internal:8443/converge"}}`)

		r = b.run(t, "", "apply", "--type", "ep", "-f", f)
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "endpoint/networking unchanged\n")
		wantOutput(t, r.stderr, "")
	})

	t.Run("EndpointSecretWithJSONOutput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		r := b.run(t, "", "apply", "--type", "endpoint", "-o", "json", "-f",
			b.file(t, "ep.json", `{"name": "n", "kinds": [{"kind": "vpc", "kind_version": 1}], "target": {"type": "https", "url": "https://n.example/"}}`))
		wantCode(t, r, ExitOK)
		// The object is printed as the server answered, secret included.
		jsonEqual(t, []byte(r.stdout), string(b.api.recorded()[0].Answer))
		answerSecret(t, b.api.recorded()[0])
		if !strings.Contains(r.stderr, "shown only this once") {
			t.Errorf("stderr = %q", r.stderr)
		}
	})

	t.Run("LambdaEndpoints", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		for name, target := range map[string]string{
			"fn":  `{type: lambda, function: "arn:aws:lambda:eu-west-1:123456789012:function:vpc", invocation: async, role_arn: "arn:aws:iam::123456789012:role/converge-invoker"}`,
			"url": `{type: lambda_url, url: "https://abcdefghijklmnopqrstuvwxyz012345.lambda-url.eu-west-1.on.aws/", auth: aws_iam}`,
		} {
			r := b.run(t, "", "apply", "--type", "endpoint", "-f", b.file(t, name+".yaml",
				"name: "+name+"\nkinds: [{kind: vpc, kind_version: 1}]\ntarget: "+target+"\nhealth: {type: none}\n"))
			wantCode(t, r, ExitOK)
			if !strings.HasPrefix(r.stdout, "endpoint/"+name+" created") {
				t.Errorf("apply %s: %q", name, r.stdout)
			}
		}
		// The function's region is read from its ARN.
		r := b.run(t, "", "get", "endpoint", "fn", "-o", "json")
		wantCode(t, r, ExitOK)
		if !strings.Contains(r.stdout, `"region": "eu-west-1"`) {
			t.Errorf("get fn: %s", r.stdout)
		}
		// A bad one is refused, the field named, nothing written.
		r = b.run(t, "", "apply", "--type", "endpoint", "-f", b.file(t, "bad.yaml",
			"name: bad\nkinds: [{kind: vpc, kind_version: 1}]\ntarget: {type: lambda, function: vpc}\n"))
		wantCode(t, r, ExitFailure)
		if !strings.Contains(r.stderr, "target.region") {
			t.Errorf("bad lambda endpoint: %q", r.stderr)
		}
		wantCode(t, b.run(t, "", "get", "endpoint", "bad"), ExitFailure)
	})

	t.Run("KindConfig", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", strings.Replace(manifestVPC1, `"kind_version": 1`, `"kind_version": 2`, 1))
		f := b.file(t, "cfg.yaml", "type: config\nkind: vpc\nkind_version: 2\nmax_inflight: 50\ntask_deadline_secs: 30\n")
		r := b.run(t, "", "apply", "-f", f)
		wantCode(t, r, ExitOK)
		// A published kind version always has a config (its defaults), so
		// the first apply configures it.
		wantOutput(t, r.stdout, "kindconfig/vpc/v2 configured\n")
		wantRequests(t, b, "PUT /kinds/vpc/versions/2/config")
		jsonEqual(t, b.api.recorded()[0].Body, `{"max_inflight":50,"task_deadline_secs":30}`)
	})

	t.Run("OutputJSONAndYAMLStreamObjects", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		f := b.file(t, "two.json", `[{"name":"a","kind":"vpc","kind_version":1,"spec":{}},{"name":"b","kind":"vpc","kind_version":1,"spec":{}}]`)
		r := b.run(t, "", "apply", "--type", "pc", "-o", "yaml", "-f", f)
		wantCode(t, r, ExitOK)
		var docs []map[string]any
		for _, doc := range strings.Split(r.stdout, "---\n") {
			var d map[string]any
			if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
				t.Fatalf("document %q: %v", doc, err)
			}
			delete(d, "created_at")
			delete(d, "updated_at")
			if v, ok := d["resource_version"].(float64); !ok || v < 1 {
				t.Fatalf("document %q has no resource_version", doc)
			}
			delete(d, "resource_version")
			docs = append(docs, d)
		}
		wantDocs := []map[string]any{
			{"kind": "vpc", "kind_version": float64(1), "name": "a", "namespace": "default", "is_default": false, "spec": map[string]any{}},
			{"kind": "vpc", "kind_version": float64(1), "name": "b", "namespace": "default", "is_default": false, "spec": map[string]any{}},
		}
		if diff := cmp.Diff(wantDocs, docs); diff != "" {
			t.Errorf("YAML stream (-want +got):\n%s", diff)
		}

		r = b.run(t, "", "apply", "--type", "pc", "-o", "json", "-f", f)
		wantCode(t, r, ExitOK)
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		var names []string
		for dec.More() {
			var v struct{ Name string }
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			names = append(names, v.Name)
		}
		if diff := cmp.Diff([]string{"a", "b"}, names); diff != "" {
			t.Errorf("names (-want +got):\n%s", diff)
		}
	})

	t.Run("UnreachableServerStopsAndSaysWhere", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		b.env[EnvServer] = deadServer(t)
		f := b.file(t, "two.json", `[`+resourceVPC+`,`+resourceVPC+`]`)
		r := b.run(t, "", "apply", "--type", "res", "-f", f)
		wantCode(t, r, ExitFailure)
		if want := "cannot reach the converge server at " + b.env[EnvServer] + " (set --server or $CONVERGE_SERVER)"; !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
		if strings.Count(r.stderr, "cannot reach") != 1 {
			t.Errorf("want one connection error, got:\n%s", r.stderr)
		}
		if !strings.Contains(r.stderr, "Error: 2 of 2 objects failed") {
			t.Errorf("stderr = %q", r.stderr)
		}
	})

	t.Run("UsageErrors", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		for _, args := range [][]string{
			{"apply"},
			{"apply", "-f", ""},
			{"apply", "--type", "widget", "-f", "x.json"},
			{"apply", "-f", "x.json", "extra-arg"},
			{"apply", "--filename"},
		} {
			r := b.run(t, "", args...)
			wantCode(t, r, ExitUsage)
			if !strings.Contains(r.stderr, "Run 'conctl apply --help' for usage.") {
				t.Errorf("%v: stderr = %q", args, r.stderr)
			}
		}
		wantRequests(t, b)
	})
}

// answerSecret returns the signing secret in the server's answer to req,
// failing the test unless it is one.
func answerSecret(t *testing.T, req recordedRequest) string {
	t.Helper()
	var v struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(req.Answer, &v); err != nil || !strings.HasPrefix(v.Secret, "whsec_") {
		t.Fatalf("%s %s answered no secret (%v): %s", req.Method, req.Path, err, req.Answer)
	}
	return v.Secret
}

// deadServer returns the URL of a server that is no longer listening.
func deadServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	return u
}

// seedKinds publishes vpc/1 and the statussink reactor kind.
func (b *testBundle) seedKinds(t *testing.T) {
	t.Helper()
	b.seed(t, "manifest", "["+manifestVPC1+","+manifestStatusSink+"]")
}

// seed applies the given objects through the CLI.
func (b *testBundle) seed(t *testing.T, typ, content string) {
	t.Helper()
	r := b.run(t, "", "apply", "--type", typ, "-f", b.file(t, "seed-"+typ+".yaml", content))
	wantCode(t, r, ExitOK)
	b.api.forget()
}

func TestGet(t *testing.T) {
	t.Parallel()

	t.Run("ResourceTableJSONYAML", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "res", resourceVPC)

		r := b.run(t, "", "get", "resource", "vpc/sample-vpc")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "KIND   VERSION   NAME         PHASE         GEN   SYNCED   AGE\n"+
			"vpc    1         sample-vpc   Reconciling   1     0        60m\n")

		r = b.run(t, "", "get", "res", "--kind", "vpc", "sample-vpc", "-o", "json")
		wantCode(t, r, ExitOK)
		// The object as the server answered it (the detail: task, conditions).
		jsonEqual(t, []byte(r.stdout), string(b.api.recorded()[1].Answer))
		var got map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]any{"kind": "vpc", "kind_version": 1.0, "name": "sample-vpc",
			"labels": map[string]any{"team": "payments"}, "spec": map[string]any{"cidr": "10.0.0.0/16"},
			"phase": "Reconciling", "generation": 1.0, "synced_gen": 0.0} {
			if diff := cmp.Diff(want, got[k]); diff != "" {
				t.Errorf("%s (-want +got):\n%s", k, diff)
			}
		}
		if !strings.HasPrefix(r.stdout, "{\n  \"") {
			t.Errorf("JSON is not indented: %q", r.stdout)
		}

		r = b.run(t, "", "--output", "yaml", "get", "resources", "vpc/sample-vpc")
		wantCode(t, r, ExitOK)
		var y map[string]any
		if err := yaml.Unmarshal([]byte(r.stdout), &y); err != nil {
			t.Fatal(err)
		}
		if y["name"] != "sample-vpc" || y["phase"] != "Reconciling" {
			t.Errorf("yaml = %v", y)
		}
		wantRequests(t, b, "GET /resources/vpc/sample-vpc", "GET /resources/vpc/sample-vpc", "GET /resources/vpc/sample-vpc")
	})

	t.Run("ResourceNameIsEscaped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Not a valid name (the server answers 404), but it must arrive
		// intact: nothing of it read as a query, a fragment or SQL.
		name := "naïve'; DROP TABLE resources;--?x=1#frag"
		r := b.run(t, "", "get", "resource", "vpc/"+name, "-o", "json")
		wantCode(t, r, ExitFailure)
		wantRequests(t, b, "GET /resources/vpc/"+name)
		if !strings.HasPrefix(r.stderr, "Error: 404 Not Found: ") {
			t.Errorf("stderr = %q", r.stderr)
		}
	})

	t.Run("ManifestNeedsKindVersion", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		r := b.run(t, "", "get", "manifest", "vpc")
		wantCode(t, r, ExitUsage)
		wantOutput(t, r.stderr, "Error: --kind-version is required: name the exact version (1..32767), e.g. --kind-version 1\n"+
			"Run 'conctl get manifest --help' for usage.\n")
		for _, v := range []string{"0", "32768", "-1", "x"} {
			wantCode(t, b.run(t, "", "get", "crd", "vpc", "--kind-version", v), ExitUsage)
		}
		wantRequests(t, b)
	})

	t.Run("ManifestTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestVPC1)
		r := b.run(t, "", "get", "manifest", "vpc", "--kind-version", "1")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "KIND   VERSION   REACTIONS       DESCRIPTION\n"+
			"vpc    1         work,teardown   vpc/v1 — a network\n")
		wantRequests(t, b, "GET /kinds/vpc/versions/1/manifest")
	})

	t.Run("ByNamePaths", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "pc", "name: cfg\nkind: vpc\nkind_version: 1\nis_default: true\nspec: {}\n")
		b.seed(t, "rb", "name: bind\nwatch_kind: vpc\ntransition: synced\nreactor: statussink\nlabel_match: {team: a}\nenabled: true\n")
		b.seed(t, "ep", "name: net\ntarget: {type: https, url: 'https://x/converge'}\nkinds: [{kind: vpc, kind_version: 1}]\nenabled: true\n")
		b.seed(t, "config", "kind: vpc\nkind_version: 1\nmax_inflight: 10\n")

		r := b.run(t, "", "get", "pc", "cfg")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "NAME   KIND   VERSION   DEFAULT   AGE\ncfg    vpc    1         true      60m\n")

		r = b.run(t, "", "get", "rb", "bind")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "NAME   WATCH_KIND   TRANSITION   REACTOR      LABEL_MATCH   ENABLED\n"+
			"bind   vpc          synced       statussink   team=a        true\n")

		r = b.run(t, "", "get", "endpoint", "net")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "NAME   TYPE    TARGET               KINDS    ENABLED   AGE\n"+
			"net    https   https://x/converge   vpc/v1   true      60m\n")

		r = b.run(t, "", "get", "config", "vpc", "--kind-version", "1")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "KIND   VERSION   MAX_INFLIGHT   DEADLINE_SECS   RESYNC_SECS   RESYNC_RECOMPOSES   ORPHAN_GRACE_SECS   MAX_ATTEMPTS\n"+
			"vpc    1         10             0               0             false               0                   0\n")

		wantRequests(t, b, "GET /providerconfigs/cfg", "GET /reactor-bindings/bind", "GET /endpoints/net",
			"GET /kinds/vpc/versions/1/config")
	})

	t.Run("NotFoundProblem", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.run(t, "", "get", "resource", "vpc/missing")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: 404 Not Found: resource vpc/missing does not exist\n")
	})

	t.Run("UsageErrors", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		for _, args := range [][]string{
			{"get"},
			{"get", "widget", "x"},
			{"get", "resource"},
			{"get", "resource", "no-slash"},
			{"get", "resource", "vpc/"},
			{"get", "resource", "--kind", "vpc", "tgw/x"},
			{"get", "resource", "a/b", "c/d"},
			{"get", "pc"},
			{"get", "manifest", "--kind-version", "1"},
			{"get", "resource", "vpc/x", "-o", "xml"},
		} {
			r := b.run(t, "", args...)
			if r.code != ExitUsage {
				t.Errorf("%v: exit status %d, want %d", args, r.code, ExitUsage)
			}
		}
		wantRequests(t, b)
	})
}

func TestList(t *testing.T) {
	t.Parallel()

	seedResources := func(t *testing.T, b *testBundle) {
		t.Helper()
		b.seedKinds(t)
		var docs []string
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			docs = append(docs, `{"kind":"vpc","kind_version":1,"name":"`+n+`","labels":{"team":"t"},"spec":{}}`)
		}
		b.seed(t, "res", "["+strings.Join(docs, ",")+"]")
	}

	t.Run("ResourceFiltersQueryString", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "res", resourceVPC)
		owner := "6b0c3a3e-8b0f-4b39-9d3a-6f1d3a2b9c10" // no such resource: no children
		r := b.run(t, "", "list", "resources", "--kind", "vpc", "--kind-version", "1",
			"--phase", "Failed", "--phase", "Degraded,Reconciling", "-l", "team=payments,env=prod",
			"--owner", owner, "--limit", "50")
		wantCode(t, r, ExitOK)
		reqs := b.api.recorded()
		if len(reqs) != 1 {
			t.Fatalf("requests = %v", requestLines(reqs))
		}
		// The table shows no spec or status: they are left out.
		want := url.Values{
			"kind": {"vpc"}, "kind_version": {"1"}, "phase": {"Failed", "Degraded", "Reconciling"},
			"label_selector": {"team=payments,env=prod"}, "owner": {owner}, "limit": {"50"}, "fields": {"-spec,-status"},
		}
		if diff := cmp.Diff(want, reqs[0].Query); diff != "" {
			t.Errorf("query (-want +got):\n%s", diff)
		}
		wantOutput(t, r.stderr, "No resources found.\n")

		// The same filters without the owner and env find sample-vpc.
		r = b.run(t, "", "list", "resources", "--kind", "vpc", "--kind-version", "1",
			"--phase", "Failed", "--phase", "Degraded,Reconciling", "-l", "team=payments")
		wantCode(t, r, ExitOK)
		if !strings.Contains(r.stdout, "sample-vpc") {
			t.Errorf("stdout = %q", r.stdout)
		}
		for _, args := range [][]string{{"--phase", "Ready"}, {"-l", "team=other"}, {"--kind-version", "2"}} {
			r = b.run(t, "", append([]string{"list", "resources"}, args...)...)
			wantCode(t, r, ExitOK)
			wantOutput(t, r.stderr, "No resources found.\n")
		}
	})

	t.Run("SelectorForms", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "res", `[{"kind":"vpc","kind_version":1,"name":"a","labels":{"team":"x"}},
			{"kind":"vpc","kind_version":1,"name":"b","labels":{"team":"y"}},
			{"kind":"vpc","kind_version":1,"name":"c"}]`)
		for _, tc := range []struct{ selector, want string }{
			{"team!=x", "b,c"}, // a resource without the label is not x
			{"team==y", "b"},
			{"team in (x, y)", "a,b"},
			{"team notin (x)", "b,c"},
			{"team", "a,b"},
			{"!team", "c"},
			{"team!=x,team", "b"},
		} {
			r := b.run(t, "", "list", "res", "-l", tc.selector, "-o", "json")
			wantCode(t, r, ExitOK)
			names := listedNames(t, r.stdout)
			if names != tc.want {
				t.Errorf("-l %q listed %s, want %s", tc.selector, names, tc.want)
			}
		}
		// What the grammar cannot read is refused, not an empty list.
		r := b.run(t, "", "list", "res", "-l", "team in x")
		wantCode(t, r, ExitFailure)
		if !strings.Contains(r.stderr, "400 Bad Request") || !strings.Contains(r.stderr, "query.label_selector") {
			t.Errorf("stderr = %q", r.stderr)
		}
	})

	t.Run("ServerRefusesBadFilters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.run(t, "", "list", "resources", "--owner", "r-1")
		wantCode(t, r, ExitFailure)
		// The detail already names the one field error: it is not listed again.
		wantOutput(t, r.stderr, "Error: 422 Unprocessable Entity: query.owner: must be a resource id (a UUID)\n")
		r = b.run(t, "", "list", "resources", "--cursor", "vpc/x")
		wantCode(t, r, ExitFailure)
		// A cursor this server never issued is malformed input: 400.
		if !strings.Contains(r.stderr, "400 Bad Request") || !strings.Contains(r.stderr, "query.cursor") {
			t.Errorf("stderr = %q", r.stderr)
		}
	})

	t.Run("AllFollowsNextCursor", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		seedResources(t, b)
		r := b.run(t, "", "list", "res", "--all", "--limit", "2")
		wantCode(t, r, ExitOK)
		reqs := b.api.recorded()
		if len(reqs) != 3 {
			t.Fatalf("want 3 pages, got %v", requestLines(reqs))
		}
		wantRequests(t, b,
			"GET /resources?"+url.Values{"fields": {"-spec,-status"}, "limit": {"2"}}.Encode(),
			"GET /resources?"+url.Values{"cursor": {reqs[0].NextCursor}, "fields": {"-spec,-status"}, "limit": {"2"}}.Encode(),
			"GET /resources?"+url.Values{"cursor": {reqs[1].NextCursor}, "fields": {"-spec,-status"}, "limit": {"2"}}.Encode())
		if reqs[0].NextCursor == "" || reqs[1].NextCursor == "" || reqs[2].NextCursor != "" {
			t.Errorf("cursors = %q, %q, %q", reqs[0].NextCursor, reqs[1].NextCursor, reqs[2].NextCursor)
		}
		wantOutput(t, r.stdout, `KIND   VERSION   NAME   PHASE         GEN   SYNCED   AGE
vpc    1         a      Reconciling   1     0        60m
vpc    1         b      Reconciling   1     0        60m
vpc    1         c      Reconciling   1     0        60m
vpc    1         d      Reconciling   1     0        60m
vpc    1         e      Reconciling   1     0        60m
`)
		wantOutput(t, r.stderr, "")

		r = b.run(t, "", "list", "res", "--all", "--limit", "2", "-o", "json")
		wantCode(t, r, ExitOK)
		var got struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Items) != 5 || got.Items[4].Name != "e" || got.NextCursor != nil {
			t.Errorf("merged list = %+v", got)
		}
	})

	t.Run("AllFollowsPagesCutByBytes", func(t *testing.T) {
		t.Parallel()
		// Pages of 3 kB: the server ends each after one or two of these
		// objects, well before --limit.
		b := setupWith(t, apiOptions{listPageBytes: 3000})
		b.seedKinds(t)
		var res, pcs []string
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			res = append(res, fmt.Sprintf(`{"kind":"vpc","kind_version":1,"name":%q,"spec":{"cidr":%q}}`, n, strings.Repeat("1", 1200)))
			pcs = append(pcs, fmt.Sprintf(`{"name":"pc-%s","kind":"vpc","kind_version":1,"spec":{"k":%q}}`, n, strings.Repeat("2", 1200)))
		}
		b.seed(t, "res", "["+strings.Join(res, ",")+"]")
		b.seed(t, "pc", "["+strings.Join(pcs, ",")+"]")
		for _, tc := range []struct{ typ, want string }{{"res", "a,b,c,d,e"}, {"pc", "pc-a,pc-b,pc-c,pc-d,pc-e"}} {
			b.api.forget()
			r := b.run(t, "", "list", tc.typ, "--all", "--limit", "1000", "-o", "json")
			wantCode(t, r, ExitOK)
			names := listedNames(t, r.stdout)
			if names != tc.want {
				t.Errorf("list %s --all listed %s, want %s", tc.typ, names, tc.want)
			}
			if n := len(b.api.recorded()); n < 3 {
				t.Errorf("list %s --all took %d pages, want at least 3 (the byte budget ends them)", tc.typ, n)
			}
		}
		// One page says there is more, and how to get it.
		b.api.forget()
		r := b.run(t, "", "list", "pc", "--limit", "1000")
		wantCode(t, r, ExitOK)
		next := b.api.recorded()[0].NextCursor
		wantOutput(t, r.stderr, "More provider configs available: rerun with --all, or with --cursor "+next+" for the next page.\n")
		r = b.run(t, "", "list", "pc", "--cursor", next)
		wantCode(t, r, ExitOK)
		if strings.Contains(r.stdout, "pc-a ") || !strings.Contains(r.stdout, "pc-") {
			t.Errorf("the next page of provider configs:\n%s", r.stdout)
		}
	})

	t.Run("OnePageHintsAtMore", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		seedResources(t, b)
		r := b.run(t, "", "list", "res", "--limit", "2")
		wantCode(t, r, ExitOK)
		if n := strings.Count(r.stdout, "\n"); n != 3 {
			t.Errorf("want header + 2 rows, got:\n%s", r.stdout)
		}
		next := b.api.recorded()[0].NextCursor
		wantOutput(t, r.stderr, "More resources available: rerun with --all, or with --cursor "+next+" for the next page.\n")

		// The hinted cursor gives the next page.
		r = b.run(t, "", "list", "res", "--limit", "2", "--cursor", next)
		wantCode(t, r, ExitOK)
		if !strings.Contains(r.stdout, "\nvpc    1         c ") || !strings.Contains(r.stdout, "\nvpc    1         d ") {
			t.Errorf("second page:\n%s", r.stdout)
		}

		b.api.forget()
		r = b.run(t, "", "list", "res", "--limit", "2", "-o", "json")
		wantCode(t, r, ExitOK)
		// The answer as the server gave it, next_cursor included.
		answer := b.api.recorded()[0].Answer
		jsonEqual(t, []byte(r.stdout), string(answer))
		if !bytes.Contains(answer, []byte(`"next_cursor":"`)) || !bytes.Contains(answer, []byte(`"name":"b"`)) {
			t.Errorf("answer = %s", answer)
		}
	})

	t.Run("OtherTypes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestVPC1)
		b.seed(t, "manifest", strings.Replace(manifestVPC1, `"kind_version": 1`, `"kind_version": 2`, 1))
		b.seed(t, "pc", `[{"name":"d","kind":"vpc","kind_version":1,"is_default":true,"spec":{}},{"name":"c","kind":"vpc","kind_version":1,"spec":{}}]`)

		r := b.run(t, "", "list", "kinds")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "KIND   VERSIONS\nvpc    1,2\n")

		r = b.run(t, "", "list", "crds", "--kind", "vpc", "-o", "yaml")
		wantCode(t, r, ExitOK)
		var y struct{ Items []map[string]any }
		if err := yaml.Unmarshal([]byte(r.stdout), &y); err != nil || len(y.Items) != 2 {
			t.Errorf("yaml list = %+v, %v", y, err)
		}

		r = b.run(t, "", "list", "pc", "--kind", "vpc", "--kind-version", "1", "--default")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "NAME   KIND   VERSION   DEFAULT   AGE\nd      vpc    1         true      60m\n")

		r = b.run(t, "", "list", "pc", "--default=false")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "NAME   KIND   VERSION   DEFAULT   AGE\nc      vpc    1         false     60m\n")

		wantCode(t, b.run(t, "", "list", "rb"), ExitOK)
		wantCode(t, b.run(t, "", "ls", "endpoints"), ExitOK)
		wantRequests(t, b,
			"GET /kinds",
			"GET /manifests?kind=vpc",
			"GET /providerconfigs?default=true&kind=vpc&kind_version=1",
			"GET /providerconfigs?default=false",
			"GET /reactor-bindings",
			"GET /endpoints")
	})

	t.Run("UsageErrors", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		for _, args := range [][]string{
			{"list"},
			{"list", "widgets"},
			{"list", "res", "extra"},
			{"list", "res", "--limit", "-1"},
			{"list", "res", "--kind-version", "0"},
			{"list", "res", "--phase", ""},
			{"list", "pc", "--phase", "Ready"},
			{"list", "kinds", "--kind", "vpc"},
		} {
			r := b.run(t, "", args...)
			if r.code != ExitUsage {
				t.Errorf("%v: exit status %d, want %d", args, r.code, ExitUsage)
			}
		}
		wantRequests(t, b)
	})
}

func TestDelete(t *testing.T) {
	t.Parallel()

	t.Run("Paths", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "manifest", `{"kind": "unused", "kind_version": 1, "reactions": []}`)
		b.seed(t, "res", resourceVPC)
		b.seed(t, "pc", "name: cfg\nkind: vpc\nkind_version: 1\nspec: {}\n")
		b.seed(t, "rb", "name: bind\nwatch_kind: vpc\ntransition: synced\nreactor: statussink\n")
		b.seed(t, "ep", "name: net\nkinds: [{kind: vpc, kind_version: 1}]\ntarget: {type: https, url: 'https://net.example/'}\n")

		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"delete", "resource", "vpc/sample-vpc", "--wait=false"}, "resource/vpc/sample-vpc deletion requested\n"},
			{[]string{"delete", "manifest", "unused", "--kind-version", "1"}, "manifest/unused/v1 deleted\n"},
			{[]string{"delete", "pc", "cfg"}, "providerconfig/cfg deleted\n"},
			{[]string{"delete", "binding", "bind"}, "reactorbinding/bind deleted\n"},
			{[]string{"rm", "ep", "net"}, "endpoint/net deleted\n"},
		} {
			r := b.run(t, "", tc.args...)
			wantCode(t, r, ExitOK)
			wantOutput(t, r.stdout, tc.want)
		}
		wantRequests(t, b,
			"DELETE /resources/vpc/sample-vpc",
			"DELETE /kinds/unused/versions/1/manifest",
			"DELETE /providerconfigs/cfg",
			"DELETE /reactor-bindings/bind",
			"DELETE /endpoints/net")

		// The resource waits for its finalizer (no provider runs here);
		// the others are gone.
		r := b.run(t, "", "get", "resource", "vpc/sample-vpc")
		wantCode(t, r, ExitOK)
		if !strings.Contains(r.stdout, " Deleting ") {
			t.Errorf("stdout = %q", r.stdout)
		}
		for _, args := range [][]string{{"get", "manifest", "unused", "--kind-version", "1"}, {"get", "pc", "cfg"},
			{"get", "rb", "bind"}, {"get", "ep", "net"}} {
			r := b.run(t, "", args...)
			wantCode(t, r, ExitFailure)
			if !strings.HasPrefix(r.stderr, "Error: 404 Not Found: ") {
				t.Errorf("%v: stderr = %q", args, r.stderr)
			}
		}
	})

	t.Run("ManifestInUseIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "res", resourceVPC)
		r := b.run(t, "", "delete", "manifest", "vpc", "--kind-version", "1")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: 409 Conflict: vpc/1 is still used by resources (sample-vpc); "+
			"delete them or re-apply them at another kind_version first\n")
	})

	t.Run("SeveralWithOneFailing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "res", `[{"kind":"vpc","kind_version":1,"name":"a","spec":{}},{"kind":"vpc","kind_version":1,"name":"c","spec":{}}]`)
		r := b.run(t, "", "delete", "res", "--kind", "vpc", "a", "b", "vpc/c", "--wait=false")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stdout, "resource/vpc/a deletion requested\nresource/vpc/c deletion requested\n")
		wantOutput(t, r.stderr, "Error: resource/vpc/b: 404 Not Found: resource vpc/b does not exist\nError: 1 of 3 deletes failed\n")
	})

	t.Run("ManifestNeedsKindVersion", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		wantCode(t, b.run(t, "", "delete", "manifest", "vpc"), ExitUsage)
		wantCode(t, b.run(t, "", "delete", "resource"), ExitUsage)
		wantRequests(t, b)
	})
}

func TestVersion(t *testing.T) {
	t.Parallel()

	t.Run("ClientAndServer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.run(t, "", "version")
		wantCode(t, r, ExitOK)
		for _, want := range []string{"Client Version: ", "Server Version: " + testServerVersion + "\n", "Server:         " + b.api.url} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
			}
		}
		wantRequests(t, b, "GET /version")

		r = b.run(t, "", "version", "-o", "json")
		wantCode(t, r, ExitOK)
		var v struct {
			Client map[string]string `json:"client"`
			Server map[string]string `json:"server"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatal(err)
		}
		if v.Client["version"] == "" || v.Server["version"] != testServerVersion {
			t.Errorf("version JSON = %+v", v)
		}
	})

	t.Run("ClientOnlyNeedsNoServer", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		b.env[EnvServer] = deadServer(t)
		r := b.run(t, "", "version", "--client")
		wantCode(t, r, ExitOK)
		if !strings.HasPrefix(r.stdout, "Client Version: ") || strings.Contains(r.stdout, "Server") {
			t.Errorf("stdout = %q", r.stdout)
		}
	})

	t.Run("UnreachableServerFails", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		b.env[EnvServer] = deadServer(t)
		r := b.run(t, "", "version")
		wantCode(t, r, ExitFailure)
		if !strings.HasPrefix(r.stdout, "Client Version: ") || !strings.Contains(r.stderr, "cannot reach the converge server") {
			t.Errorf("stdout = %q, stderr = %q", r.stdout, r.stderr)
		}
	})
}

func TestRotateSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.run(t, "", "apply", "--type", "ep", "-f",
		b.file(t, "ep.yaml", "name: net\nkinds: [{kind: vpc, kind_version: 1}]\ntarget: {type: https, url: 'https://net.example/'}\n"))
	wantCode(t, r, ExitOK)
	first := answerSecret(t, b.api.recorded()[0])
	b.api.forget()

	r = b.run(t, "", "rotate-secret", "endpoint", "net")
	wantCode(t, r, ExitOK)
	wantRequests(t, b, "POST /endpoints/net/rotate-secret")
	rotated := answerSecret(t, b.api.recorded()[0])
	if rotated == first {
		t.Errorf("the rotated secret is the old one: %s", rotated)
	}
	wantOutput(t, r.stdout, "endpoint/net secret rotated\n\n  signing secret: "+rotated+"\n\n")
	if !strings.Contains(r.stderr, "shown only this once") {
		t.Errorf("stderr = %q", r.stderr)
	}

	r = b.run(t, "", "rotate-secret", "endpoint", "nope")
	wantCode(t, r, ExitFailure)
	wantOutput(t, r.stderr, "Error: 404 Not Found: endpoint \"nope\" does not exist\n")
}

func TestGlobalFlags(t *testing.T) {
	t.Parallel()

	t.Run("ServerFromEnvironment", func(t *testing.T) {
		t.Parallel()
		b := setup(t) // $CONVERGE_SERVER points at the API
		wantCode(t, b.run(t, "", "list", "kinds"), ExitOK)
		wantRequests(t, b, "GET /kinds")
	})

	t.Run("ServerFlagOverridesEnvironment", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env[EnvServer] = deadServer(t)
		wantCode(t, b.run(t, "", "--server", b.api.url, "list", "kinds"), ExitOK)
		wantCode(t, b.run(t, "", "list", "kinds", "--server", b.api.url+"/api/v1/"), ExitOK)
		wantRequests(t, b, "GET /kinds", "GET /kinds")
	})

	t.Run("DefaultServer", func(t *testing.T) {
		t.Parallel()
		a := newApp(&bytes.Buffer{}, &bytes.Buffer{}, func(string) string { return "" })
		a.output, a.timeout = outputTable, TimeoutDefault
		c, err := a.api()
		if err != nil {
			t.Fatal(err)
		}
		if c.Server() != ServerDefault || c.base != ServerDefault+APIPrefix {
			t.Errorf("server = %q, base = %q", c.Server(), c.base)
		}
	})

	t.Run("BearerToken", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, apiOptions{auth: true})
		wantCode(t, b.run(t, "", "list", "kinds"), ExitFailure) // no token: 401
		b.env[EnvToken] = testReadToken
		wantCode(t, b.run(t, "", "list", "kinds"), ExitOK)
		wantCode(t, b.run(t, "", "list", "kinds", "--token", testAdminToken), ExitOK)
		var got []string
		for _, r := range b.api.recorded() {
			got = append(got, r.Header.Get("Authorization"))
		}
		want := []string{"", "Bearer " + testReadToken, "Bearer " + testAdminToken}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Authorization (-want +got):\n%s", diff)
		}
		if ua := b.api.recorded()[0].Header.Get("User-Agent"); !strings.HasPrefix(ua, "conctl/") {
			t.Errorf("User-Agent = %q", ua)
		}

		// A read token cannot write; the flag's admin token can.
		f := b.file(t, "m.json", manifestVPC1)
		r := b.run(t, "", "apply", "--type", "manifest", "-f", f)
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: manifest/vpc/v1 from "+f+": 403 Forbidden: this token may only read; PUT needs an admin token\n"+
			"  (check --token or $CONVERGE_TOKEN)\n")
		r = b.run(t, "", "apply", "--type", "manifest", "-f", f, "--token", testAdminToken)
		wantCode(t, r, ExitOK)
	})

	t.Run("UnauthorizedHintsAtToken", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, apiOptions{auth: true})
		for token, detail := range map[string]string{
			"":            "a bearer token is required: send Authorization: Bearer <token>",
			"wrong-token": "the bearer token is not valid",
		} {
			b.env[EnvToken] = token
			r := b.run(t, "", "list", "kinds")
			wantCode(t, r, ExitFailure)
			wantOutput(t, r.stderr, "Error: 401 Unauthorized: "+detail+"\n  (check --token or $CONVERGE_TOKEN)\n")
		}
	})

	t.Run("NonProblemErrorBody", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html>\n  <body>upstream   down</body>\n</html>"))
		}))
		t.Cleanup(srv.Close)
		b := &testBundle{env: map[string]string{EnvServer: srv.URL}}
		r := b.run(t, "", "list", "kinds")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: 502 Bad Gateway: <html> <body>upstream down</body> </html>\n")
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(func() { close(release); srv.Close() })
		b := &testBundle{env: map[string]string{EnvServer: srv.URL}}
		r := b.run(t, "", "list", "kinds", "--timeout", "50ms")
		wantCode(t, r, ExitFailure)
		if want := "no answer from the converge server at " + srv.URL + " within 50ms"; !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q: %q", want, r.stderr)
		}
	})

	t.Run("UsageErrors", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		for _, tc := range []struct {
			args []string
			env  string
		}{
			{args: []string{"list", "kinds", "-o", "xml"}},
			{args: []string{"list", "kinds", "--server", "localhost:8080"}},
			{args: []string{"list", "kinds", "--server", "http://"}},
			{args: []string{"list", "kinds", "--timeout", "-1s"}},
			{args: []string{"list", "kinds", "--timeout", "soon"}},
			{args: []string{"list", "kinds"}, env: "ftp://example.com"},
			{args: []string{"bogus"}},
			{args: []string{"--bogus"}},
		} {
			b.env[EnvServer] = cmpOrText(tc.env, b.api.url)
			r := b.run(t, "", tc.args...)
			if r.code != ExitUsage {
				t.Errorf("%v (env %q): exit status %d, want %d", tc.args, tc.env, r.code, ExitUsage)
			}
		}
		wantRequests(t, b)
	})

	t.Run("HelpAndNoArgsExitZero", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		for _, args := range [][]string{nil, {"--help"}, {"apply", "--help"}, {"help", "list"}, {"list", "res", "-h"}} {
			r := b.run(t, "", args...)
			wantCode(t, r, ExitOK)
			if !strings.Contains(r.stdout, "Usage:") {
				t.Errorf("%v: no usage in stdout", args)
			}
		}
	})
}

func TestNewAndExitStatus(t *testing.T) {
	t.Parallel()
	b := setupNoAPI(t)
	var stdout, stderr bytes.Buffer
	cmd := New(&stdout, &stderr, func(k string) string { return b.env[k] })
	cmd.SetArgs([]string{"get", "manifest", "vpc"})
	err := cmd.Execute()
	if got := ExitStatus(err); got != ExitUsage {
		t.Errorf("ExitStatus(%v) = %d, want %d", err, got, ExitUsage)
	}
	if stderr.Len() != 0 {
		t.Errorf("New's command printed its error: %q", stderr.String())
	}
}
