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
	"github.com/convergeplane/converge/internal/testkit/nodetest"
	"github.com/convergeplane/converge/sdk/typescript/sdkbuild"
)

// TestNodeFunctionOnTheLambdaEmulator runs functions/node-provider (the TypeScript
// SDK's Lambda adapter serving examples/node-provider's kinds) under the AWS Lambda
// Runtime Interface Emulator, registered through the API as a `lambda` target with
// batches on: resources converge, several of them in batched invokes, and a terminal
// failure pins a resource Failed. The bootstrap is the SDK's test client of the
// Runtime API (sdk/typescript/test/lambda-runtime.mjs), standing in for the Node
// runtime's loop, which needs a native build.
func TestNodeFunctionOnTheLambdaEmulator(t *testing.T) {
	sdk := sdkbuild.Ensure(t)
	node := nodetest.LookPath(t, "node")
	t.Parallel()
	rie := lambdatest.Emulator(t)
	fn, err := filepath.Abs("../functions/node-provider")
	must(t, err)
	nodetest.NPMCI(t, fn)
	// The function's kinds are the example's files, linked: Node resolves their
	// imports from where they really are, so the example's packages are needed too
	// (the zip make functions builds holds copies beside the function's packages).
	example, err := filepath.Abs("../examples/node-provider")
	must(t, err)
	nodetest.NPMCI(t, example)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "function.log")
	bootstrap := filepath.Join(dir, "bootstrap")
	// The function's stderr goes to a file as well, to show that batches arrived.
	script := fmt.Sprintf("#!/bin/sh\ncd %q\nexec %q %q index.mjs handler 2>>%q\n", fn, node, filepath.Join(sdk, "test", "lambda-runtime.mjs"), logFile)
	must(t, os.WriteFile(bootstrap, []byte(script), 0o755))
	addr := lambdatest.StartEmulator(t, rie, bootstrap, "PROVIDER_SECRETS="+lambdaSecret, "PROVIDER_LOG_LEVEL=debug")
	s := startAllWith(t, func(c *convergecli.Config) { c.AWS = lambdatest.AWSConfig })

	manifest, err := os.ReadFile("../examples/node-provider/account.kind.json")
	must(t, err)
	if code, body := s.call("PUT", "/kinds/account/manifest", json.RawMessage(manifest)); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	// The emulator runs one invocation at a time: with one slot, the tasks claimed
	// meanwhile queue and go together, up to max_batch.
	if code, body := s.call("POST", "/endpoints", map[string]any{"name": "rie-node", "kinds": []map[string]any{{"kind": "account", "kind_version": 1}},
		"max_concurrency": 1, "max_batch": 8,
		"target": map[string]any{"type": "lambda", "function": "function", "region": lambdatest.Region, "endpoint_url": "http://" + addr},
		"health": map[string]any{"type": "none"}, "secret": lambdaSecret}); code != 201 {
		t.Fatalf("register = %d %s", code, body)
	}

	const n = 12
	for i := range n {
		if code, body := s.call("POST", "/resources", map[string]any{"kind": "account", "kind_version": 1,
			"name": fmt.Sprintf("team-%d", i), "spec": map[string]any{"team": fmt.Sprintf("t%d", i)}}); code != 201 {
			t.Fatalf("apply account = %d %s", code, body)
		}
	}
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "account", "kind_version": 1, "name": "team-bad",
		"spec": map[string]any{"team": "Not A Label"}}); code != 201 {
		t.Fatalf("apply team-bad = %d %s", code, body)
	}
	for i := range n {
		path := fmt.Sprintf("account/team-%d", i)
		s.waitReady(path)
		d, _ := s.detail(path)
		if want := fmt.Sprintf(`"team":"t%d"`, i); !strings.Contains(string(d.Status), want) || !strings.Contains(string(d.Status), `"account_id":"acct-`) {
			t.Errorf("%s status %s, want %s and an account_id", path, d.Status, want)
		}
	}
	s.waitFailed("account/team-bad", "not a DNS label")
	log, err := os.ReadFile(logFile)
	must(t, err)
	if !strings.Contains(string(log), `"msg":"serving a batch"`) {
		t.Errorf("no batched invoke reached the function; its log:\n%s", log)
	}
	s.checkInvariants()
}
