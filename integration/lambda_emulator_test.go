package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/transport/lambdatest"
)

// TestQuickstartOnTheLambdaEmulator runs the dispatcher against the real
// quickstart function (functions/quickstart: aws-lambda-go and
// webhooksdk/lambda) under the AWS Lambda Runtime Interface Emulator,
// registered through the API as a `lambda` target: the site composite and
// its leaves converge, with the cdn's origin flowing from a bucket, and a
// terminal outcome pins a resource Failed.
func TestQuickstartOnTheLambdaEmulator(t *testing.T) {
	t.Parallel()
	rie := lambdatest.Emulator(t)
	addr := lambdatest.StartEmulator(t, rie, lambdatest.BuildBootstrap(t, "../functions/quickstart"), "PROVIDER_SECRETS="+lambdaSecret)
	s := startAllWith(t, func(c *convergecli.Config) { c.AWS = lambdatest.AWSConfig })

	manifests, err := filepath.Glob("../examples/quickstart/manifests/*.json")
	must(t, err)
	for _, f := range manifests {
		b, err := os.ReadFile(f)
		must(t, err)
		var m struct{ Kind string }
		must(t, json.Unmarshal(b, &m))
		if code, body := s.call("PUT", "/kinds/"+m.Kind+"/manifest", json.RawMessage(b)); code != 201 {
			t.Fatalf("manifest %s = %d %s", m.Kind, code, body)
		}
	}
	kinds := []map[string]any{{"kind": "bucket", "kind_version": 1}, {"kind": "cdn", "kind_version": 1}, {"kind": "site", "kind_version": 1}}
	// The emulator runs one invocation at a time, and its function is
	// always named "function".
	if code, body := s.call("POST", "/endpoints", map[string]any{"name": "rie", "kinds": kinds, "max_concurrency": 1,
		"target": map[string]any{"type": "lambda", "function": "function", "region": lambdatest.Region, "endpoint_url": "http://" + addr},
		"health": map[string]any{"type": "none"}, "secret": lambdaSecret}); code != 201 {
		t.Fatalf("register = %d %s", code, body)
	}

	shop, err := os.ReadFile("../examples/quickstart/resources/shop.json")
	must(t, err)
	if code, body := s.call("POST", "/resources", json.RawMessage(shop)); code != 201 {
		t.Fatalf("apply shop = %d %s", code, body)
	}
	s.waitReady("site/shop")
	cdn, _ := s.detail("cdn/shop-cdn")
	bucket, _ := s.detail("bucket/shop-bucket-0")
	var origin struct{ Origin string }
	var id struct {
		BucketID string `json:"bucket_id"`
	}
	must(t, json.Unmarshal(cdn.Spec, &origin))
	must(t, json.Unmarshal(bucket.Status, &id))
	if origin.Origin == "" || origin.Origin != id.BucketID || cdn.PhaseOf() != model.PhaseReady {
		t.Errorf("cdn %s with origin %q, want bucket-0's id %q", cdn.Phase, origin.Origin, id.BucketID)
	}

	// A cdn with no origin is refused terminally by the function.
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "cdn", "kind_version": 1, "name": "orphan-cdn",
		"spec": map[string]any{"ttl_secs": 60}}); code != 201 {
		t.Fatalf("apply cdn = %d %s", code, body)
	}
	s.waitFailed("cdn/orphan-cdn", "origin")
	s.checkInvariants()
}
