package stdterraform

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/convergeplane/converge/control/schema"
	"github.com/convergeplane/converge/internal/testkit/awstest"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// withConfig replaces req's provider config.
func withConfig(t *testing.T, req webhooksdk.Request, cfg map[string]any) webhooksdk.Request {
	t.Helper()
	var err error
	if req.Config, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	return req
}

// s3Bucket makes a bucket on the test endpoint and returns a client for it.
func s3Bucket(t *testing.T, endpoint, bucket string) *s3.Client {
	t.Helper()
	ac, err := awsconfig.LoadDefaultConfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	client := s3.NewFromConfig(ac, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
	})
	if _, err := client.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	return client
}

// objects lists the bucket's keys.
func objects(t *testing.T, client *s3.Client, bucket string) []string {
	t.Helper()
	out, err := client.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// waitFile polls until path holds want, or fails t at a generous deadline.
func waitFile(t *testing.T, path, want string, done <-chan error) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if data, _ := os.ReadFile(path); strings.Contains(string(data), want) {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the apply ended (%v) before %s held %q", err, path, want)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held %q", path, want)
		}
	}
}

type result struct {
	out webhooksdk.Outcome
	err error
}

// TestS3Backend applies one resource from two providers (two replicas: own state_dir,
// one S3 backend) at once: the second waits on the first's native S3 lock (its
// PutObject of the .tflock refused), then plans no changes against the state the first
// wrote, and both succeed; a third with no lock timeout is refused, transiently. A second resource gets its own state beside it. Delete
// destroys and removes the resource's state object, the other's staying; a repeat, and
// a resource never applied with an unusable spec, succeed at once.
func TestS3Backend(t *testing.T) {
	needTerraform(t)
	endpoint := awstest.Start(t)
	client := s3Bucket(t, endpoint, "tf-state")
	gate := t.TempDir()
	spec := map[string]any{"source": module(t, "gated"), "vars": map[string]any{"gate": gate}}
	backendCfg := map[string]any{"s3": map[string]any{"bucket": "tf-state", "region": awstest.Region,
		"endpoint": endpoint, "use_path_style": true}, "state_prefix": "teams/a"}
	cfgA := map[string]any{"state_dir": t.TempDir(), "backend": backendCfg, "lock_timeout_secs": 600}
	cfgB := map[string]any{"state_dir": t.TempDir(), "backend": backendCfg, "lock_timeout_secs": 600}

	// Replica B runs terraform through a wrapper logging its debug output, where a
	// refused lock shows as S3's PreconditionFailed.
	tfLog := filepath.Join(t.TempDir(), "b.log")
	real, err := exec.LookPath("terraform")
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "terraform")
	script := fmt.Sprintf("#!/bin/sh\nexport TF_LOG=debug TF_LOG_PATH=%s\nexec %s \"$@\"\n", tfLog, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	a, b := New("stdterraform"), New("stdterraform", WithBinary(wrapper))

	ctx := t.Context()
	runA, runB := make(chan error, 1), make(chan error, 1)
	resA, resB := make(chan result, 1), make(chan result, 1)
	go func() {
		out, err := a.Work(ctx, withConfig(t, request(t, reactionApply, "", spec), cfgA))
		runA <- err
		resA <- result{out, err}
	}()
	waitFile(t, filepath.Join(gate, "started"), "run", runA)
	go func() {
		out, err := b.Work(ctx, withConfig(t, request(t, reactionApply, "", spec), cfgB))
		runB <- err
		resB <- result{out, err}
	}()
	waitFile(t, tfLog, "api error PreconditionFailed", runB)
	if keys := objects(t, client, "tf-state"); !slices.Contains(keys, "teams/a/"+resourceID+"/terraform.tfstate.tflock") {
		t.Errorf("objects while A applies = %v, want its .tflock", keys)
	}
	// A third replica that will not wait is refused at once, transiently.
	cfgC := map[string]any{"state_dir": t.TempDir(), "backend": backendCfg}
	_, err = sdktest.Run(t, New("stdterraform"), withConfig(t, request(t, reactionApply, "", spec), cfgC))
	if err == nil || webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), "Error acquiring the state lock") {
		t.Errorf("apply C with no lock timeout = %v, want a transient lock refusal", err)
	}
	if err := os.WriteFile(filepath.Join(gate, "open"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ra, rb := <-resA, <-resB
	if ra.err != nil || condition(ra.out, "Ready").Reason != "Applied" {
		t.Fatalf("apply A = %v, %+v", ra.err, ra.out.Conditions)
	}
	if rb.err != nil || condition(rb.out, "Planned").Reason != "NoChanges" {
		t.Fatalf("apply B = %v, %+v; want no changes after waiting for A's lock", rb.err, rb.out.Conditions)
	}
	if string(ra.out.Status) != string(rb.out.Status) || !strings.Contains(string(ra.out.Status), gate) {
		t.Errorf("statuses: A %s, B %s", ra.out.Status, rb.out.Status)
	}
	if data, _ := os.ReadFile(filepath.Join(gate, "started")); strings.Count(string(data), "run") != 1 {
		t.Errorf("the provisioner ran %d times, want once", strings.Count(string(data), "run"))
	}
	state := "teams/a/" + resourceID + "/terraform.tfstate"
	if keys := objects(t, client, "tf-state"); !slices.Equal(keys, []string{state}) {
		t.Errorf("objects after both applies = %v, want only %s", keys, state)
	}
	for _, dir := range []string{cfgA["state_dir"].(string), cfgB["state_dir"].(string)} {
		if _, err := os.Stat(filepath.Join(dir, resourceID, stateFile)); err == nil {
			t.Errorf("a local state in %s beside the S3 backend", dir)
		}
	}

	// Another resource beside it in the bucket: its own workspace, created while the
	// backend already holds one.
	other := withConfig(t, request(t, reactionApply, "", map[string]any{"source": module(t, "hello"), "vars": map[string]any{"name": "other"}}), cfgA)
	other.Resource.ID = "5d0f9a52-1c1e-4a43-8f6b-2b7f4c0de001"
	if _, err := sdktest.Run(t, a, other); err != nil {
		t.Fatalf("apply of another resource: %v", err)
	}
	otherState := "teams/a/" + other.Resource.ID + "/terraform.tfstate"
	// Enough workspaces that their list is longer than the output tail an error keeps.
	for i := range 200 {
		key := fmt.Sprintf("teams/a/zz-filler-%03d-%s/terraform.tfstate", i, strings.Repeat("x", 30))
		if _, err := client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("tf-state"), Key: aws.String(key), Body: strings.NewReader("{}")}); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := sdktest.Run(t, b, withConfig(t, request(t, reactionDestroy, "", spec), cfgB)); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if keys := objects(t, client, "tf-state"); slices.Contains(keys, state) || !slices.Contains(keys, otherState) || len(keys) != 201 {
		t.Errorf("objects after destroy = %v, want the other resource's %s and the fillers", keys, otherState)
	}
	if _, err := sdktest.Run(t, a, withConfig(t, request(t, reactionDestroy, "", spec), cfgA)); err != nil {
		t.Errorf("second destroy: %v", err)
	}
	never := withConfig(t, request(t, reactionDestroy, "", map[string]any{"source": "nowhere"}), cfgA)
	if _, err := sdktest.Run(t, a, never); err != nil {
		t.Errorf("destroy of a resource never applied: %v", err)
	}
}

// TestRawBackend writes the config's raw backend text with the state key in place of
// the placeholder: the state lands at that key.
func TestRawBackend(t *testing.T) {
	needTerraform(t)
	endpoint := awstest.Start(t)
	client := s3Bucket(t, endpoint, "raw-state")
	raw := fmt.Sprintf(`terraform {
  backend "s3" {
    bucket         = "raw-state"
    key            = "%s.tfstate"
    use_lockfile   = true
    use_path_style = true
    endpoints      = { s3 = %q }
  }
}
`, stateKeyPlaceholder, endpoint)
	cfg := map[string]any{"state_dir": t.TempDir(), "backend": map[string]any{"raw": raw}}
	spec := map[string]any{"source": module(t, "hello"), "vars": map[string]any{"name": "raw"}}
	p := New("stdterraform")
	if _, err := sdktest.Run(t, p, withConfig(t, request(t, reactionApply, "", spec), cfg)); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if keys := objects(t, client, "raw-state"); !slices.Equal(keys, []string{"converge/" + resourceID + ".tfstate"}) {
		t.Errorf("objects = %v, want the state at the placeholder's key", keys)
	}
	if _, err := sdktest.Run(t, p, withConfig(t, request(t, reactionDestroy, "", spec), cfg)); err != nil {
		t.Fatalf("destroy: %v", err)
	}
}

// TestBackendConfigErrors: a backend block the provider cannot use is terminal and
// names the field.
func TestBackendConfigErrors(t *testing.T) {
	p := New("stdterraform")
	spec := map[string]any{"source": module(t, "hello")}
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		want string
	}{
		{"two backends", map[string]any{"backend": map[string]any{"s3": map[string]any{"bucket": "b"}, "gcs": map[string]any{"bucket": "b"}}}, "config.backend: set exactly one"},
		{"no backend", map[string]any{"backend": map[string]any{"state_prefix": "x"}}, "config.backend: set exactly one"},
		{"s3 without bucket", map[string]any{"backend": map[string]any{"s3": map[string]any{}}}, "config.backend.s3.bucket"},
		{"gcs without bucket", map[string]any{"backend": map[string]any{"gcs": map[string]any{}}}, "config.backend.gcs.bucket"},
		{"azurerm without account", map[string]any{"backend": map[string]any{"azurerm": map[string]any{"container_name": "c"}}}, "config.backend.azurerm.storage_account_name"},
		{"azurerm without container", map[string]any{"backend": map[string]any{"azurerm": map[string]any{"storage_account_name": "a"}}}, "config.backend.azurerm.container_name"},
		{"raw without placeholder", map[string]any{"backend": map[string]any{"raw": `terraform { backend "http" {} }`}}, "config.backend.raw"},
		{"escaping prefix", map[string]any{"backend": map[string]any{"gcs": map[string]any{"bucket": "b"}, "state_prefix": "a/../b"}}, "config.backend.state_prefix"},
		{"absolute prefix", map[string]any{"backend": map[string]any{"gcs": map[string]any{"bucket": "b"}, "state_prefix": "/a"}}, "config.backend.state_prefix"},
		{"negative lock timeout", map[string]any{"lock_timeout_secs": -1}, "config.lock_timeout_secs"},
		{"unknown binary", map[string]any{"binary": "tf"}, "config.binary"},
		{"relative versions_dir", map[string]any{"versions_dir": "versions"}, "config.versions_dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg["state_dir"] = t.TempDir()
			_, err := sdktest.Run(t, p, withConfig(t, request(t, reactionApply, "", spec), tc.cfg))
			if err == nil || !webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v (terminal %v), want a terminal one naming %q", err, webhooksdk.IsTerminal(err), tc.want)
			}
		})
	}
}

// TestBackendFiles: each backend block becomes the backend terraform is given, with
// native locking on, the resource's id as its workspace, and no credentials.
func TestBackendFiles(t *testing.T) {
	dir := filepath.Join("/state", resourceID)
	off := false
	for _, tc := range []struct {
		cfg       backendConfig
		want      string
		workspace bool
	}{
		{backendConfig{S3: &s3Backend{Bucket: "b", Region: "eu-west-1"}},
			`{"terraform":{"backend":{"s3":{"bucket":"b","encrypt":true,"key":"terraform.tfstate","region":"eu-west-1","use_lockfile":true,"workspace_key_prefix":"converge"}}}}`, true},
		{backendConfig{GCS: &gcsBackend{Bucket: "g"}, StatePrefix: "x/y"},
			`{"terraform":{"backend":{"gcs":{"bucket":"g","prefix":"x/y"}}}}`, true},
		{backendConfig{AzureRM: &azurermBackend{StorageAccountName: "sa", ContainerName: "c", UseAzureADAuth: &off}},
			`{"terraform":{"backend":{"azurerm":{"container_name":"c","key":"converge.tfstate","storage_account_name":"sa","use_azuread_auth":false}}}}`, true},
		{backendConfig{Raw: `key = "` + stateKeyPlaceholder + `"`}, `key = "converge/` + resourceID + `"`, false},
	} {
		b, err := newBackend(&tc.cfg, dir)
		if err != nil {
			t.Fatal(err)
		}
		if string(b.body) != tc.want {
			t.Errorf("backend %s =\n%s\nwant\n%s", b.file, b.body, tc.want)
		}
		if got := b.workspace == resourceID; got != tc.workspace {
			t.Errorf("backend %s: workspace %q", b.file, b.workspace)
		}
	}
}

// TestManifestSchemas: the shipped schemas take the backend, version and binary fields
// and refuse their misuse at the field, before any task runs.
func TestManifestSchemas(t *testing.T) {
	var m struct {
		Spec   json.RawMessage `json:"spec_schema"`
		Config json.RawMessage `json:"config_schema"`
	}
	if err := json.Unmarshal(Manifest(), &m); err != nil {
		t.Fatal(err)
	}
	specSchema, err := schema.Compile(m.Spec)
	if err != nil {
		t.Fatal(err)
	}
	configSchema, err := schema.Compile(m.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		schema *schema.Schema
		doc    string
		want   string // "" when valid, else the field the error names
	}{
		{configSchema, `{"state_dir": "/s", "backend": {"s3": {"bucket": "b", "region": "eu-west-1", "endpoint": "http://127.0.0.1:9000", "use_path_style": true}, "state_prefix": "teams/a"}, "lock_timeout_secs": 60}`, ""},
		{configSchema, `{"backend": {"gcs": {"bucket": "b"}}, "binary": "tofu", "versions_dir": "/opt/tf"}`, ""},
		{configSchema, `{"backend": {"azurerm": {"storage_account_name": "a", "container_name": "c", "use_azuread_auth": true}}}`, ""},
		{configSchema, `{"backend": {"raw": "terraform { backend \"pg\" { schema_name = \"__CONVERGE_STATE_KEY__\" } }"}}`, ""},
		{configSchema, `{"backend": {"s3": {"bucket": "b"}, "gcs": {"bucket": "b"}}}`, "/backend"},
		{configSchema, `{"backend": {"state_prefix": "x"}}`, "/backend"},
		{configSchema, `{"backend": {"s3": {"region": "r"}}}`, "/backend/s3"},
		{configSchema, `{"backend": {"s3": {"bucket": "b", "access_key": "AKIA"}}}`, "/backend/s3"},
		{configSchema, `{"backend": {"raw": "terraform { backend \"pg\" {} }"}}`, "/backend/raw"},
		{configSchema, `{"backend": {"gcs": {"bucket": "b"}, "state_prefix": "/abs"}}`, "/backend/state_prefix"},
		{configSchema, `{"lock_timeout_secs": -1}`, "/lock_timeout_secs"},
		{configSchema, `{"binary": "opentofu"}`, "/binary"},
		{configSchema, `{"versions_dir": "rel"}`, "/versions_dir"},
		{specSchema, `{"source": "/m", "tf_version": "1.7.5"}`, ""},
		{specSchema, `{"source": "/m", "tf_version": "latest:^1\\.7"}`, ""},
		{specSchema, `{"source": "/m", "tf_version": "min-required"}`, ""},
		{specSchema, `{"source": "/m", "tf_version": "1.7"}`, "/tf_version"},
		{specSchema, `{"source": "/m", "tf_version": "newest"}`, "/tf_version"},
	} {
		err := tc.schema.Validate(json.RawMessage(tc.doc))
		if tc.want == "" && err != nil {
			t.Errorf("%s: %v", tc.doc, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: error = %v, want one at %s", tc.doc, err, tc.want)
		}
	}
}
