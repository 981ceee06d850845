package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/dispatch/transport/lambdatest"
)

// TestPythonFunctionOnTheLambdaEmulator runs functions/python-provider (the Python SDK's
// Lambda adapter, converge_provider.lambda_handler) under the AWS Lambda Runtime
// Interface Emulator with the SDK's Runtime API client (converge_provider.lambda_runtime)
// as its bootstrap, registered through the API as a `lambda` target with batches on:
// resources of its kinds converge, several of them in batched invokes, and a terminal
// outcome pins a resource Failed.
func TestPythonFunctionOnTheLambdaEmulator(t *testing.T) {
	t.Parallel()
	rie := lambdatest.Emulator(t)
	fn, err := filepath.Abs("../functions/python-provider")
	must(t, err)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "function.log")
	bootstrap := filepath.Join(dir, "bootstrap")
	// The function's stderr goes to a file as well, to show that batches arrived.
	script := fmt.Sprintf("#!/bin/sh\ncd %q\nexec /usr/bin/python3 -m converge_provider.lambda_runtime handler.handler 2>>%q\n", fn, logFile)
	must(t, os.WriteFile(bootstrap, []byte(script), 0o755))
	addr := lambdatest.StartEmulator(t, rie, bootstrap, "PROVIDER_SECRETS="+lambdaSecret, "PROVIDER_LOG_LEVEL=DEBUG",
		"PYTHONDONTWRITEBYTECODE=1")
	s := startAllWith(t, func(c *convergecli.Config) { c.AWS = lambdatest.AWSConfig })

	for _, m := range []struct{ kind, file string }{
		{"bucket", "../examples/quickstart/manifests/bucket.json"},
		{"cdn", "../examples/quickstart/manifests/cdn.json"},
	} {
		b, err := os.ReadFile(m.file)
		must(t, err)
		if code, body := s.call("PUT", "/kinds/"+m.kind+"/manifest", json.RawMessage(b)); code != 201 {
			t.Fatalf("manifest %s = %d %s", m.kind, code, body)
		}
	}
	kinds := []map[string]any{{"kind": "bucket", "kind_version": 1}, {"kind": "cdn", "kind_version": 1}}
	// The emulator runs one invocation at a time: with one slot, the tasks claimed
	// meanwhile queue and go together, up to max_batch.
	if code, body := s.call("POST", "/endpoints", map[string]any{"name": "rie-python", "kinds": kinds,
		"max_concurrency": 1, "max_batch": 8,
		"target": map[string]any{"type": "lambda", "function": "function", "region": lambdatest.Region, "endpoint_url": "http://" + addr},
		"health": map[string]any{"type": "none"}, "secret": lambdaSecret}); code != 201 {
		t.Fatalf("register = %d %s", code, body)
	}

	const n = 12
	for i := range n {
		if code, body := s.call("POST", "/resources", map[string]any{"kind": "bucket", "kind_version": 1,
			"name": fmt.Sprintf("b%d", i), "spec": map[string]any{"region": "eu-west-1"}}); code != 201 {
			t.Fatalf("apply bucket = %d %s", code, body)
		}
	}
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "cdn", "kind_version": 1, "name": "orphan-cdn",
		"spec": map[string]any{"ttl_secs": 60}}); code != 201 {
		t.Fatalf("apply cdn = %d %s", code, body)
	}
	for i := range n {
		path := fmt.Sprintf("bucket/b%d", i)
		s.waitReady(path)
		d, _ := s.detail(path)
		if want := fmt.Sprintf(`"bucket_id":"bkt-b%d"`, i); !strings.Contains(string(d.Status), want) {
			t.Errorf("%s status %s, want %s", path, d.Status, want)
		}
	}
	s.waitFailed("cdn/orphan-cdn", "spec.origin is empty")
	log, err := os.ReadFile(logFile)
	must(t, err)
	if !strings.Contains(string(log), "serving a batch of") {
		t.Errorf("no batched invoke reached the function; its log:\n%s", log)
	}
	s.checkInvariants()
}
