package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/convergeplane/converge/dispatch/transport/lambdatest"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestUnderEmulator runs this function's bootstrap, built as for Lambda, under the real
// runtime emulator and invokes it the way the dispatcher does, a signed converge.v1
// event POSTed to the Invoke API, with a zip bundle of two files as the task's bundle.
func TestUnderEmulator(t *testing.T) {
	addr := lambdatest.StartEmulator(t, lambdatest.Emulator(t), lambdatest.BuildBootstrap(t, "."), "PROVIDER_SECRETS="+secret)
	compose := func(t *testing.T, bundle []byte) webhooksdk.Result {
		t.Helper()
		env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "stdstarlark", Version: 1})
		env.Reaction = "compose"
		env.Resource.Spec = json.RawMessage(`{"name":"shop"}`)
		env.Config = json.RawMessage(`{"apps":2}`)
		env.Bundle = bundle
		body, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		return lambdatest.ResultOf(t, lambdatest.InvokeEmulator(t, addr, sdktest.InvokeEvent(t, secret, body, nil)))
	}

	t.Run("bundle with load", func(t *testing.T) {
		res := compose(t, zipOf(t, map[string]string{
			"compose.star":  "load(\"lib/apps.star\", \"apps\")\ndef compose(spec, config):\n    return struct(children = apps(spec[\"name\"], config[\"apps\"]))\n",
			"lib/apps.star": "def apps(name, n):\n    return [struct(kind = \"app\", kind_version = 1, name = \"%s-%d\" % (name, i)) for i in range(n)]\n",
		}))
		if res.Outcome == nil || len(res.Outcome.Children) != 2 || res.Outcome.Children[1].Name != "shop-1" {
			t.Errorf("outcome %+v, error %+v; want the two apps lib/apps.star makes", res.Outcome, res.Error)
		}
	})
	t.Run("missing module", func(t *testing.T) {
		res := compose(t, zipOf(t, map[string]string{
			"compose.star": "load(\"lib/apps.star\", \"apps\")\ndef compose(spec, config):\n    return {}\n",
		}))
		if res.Error == nil || !res.Error.Terminal || !strings.Contains(res.Error.Message, "no lib/apps.star in the bundle") {
			t.Errorf("outcome %+v, error %+v; want a terminal error naming lib/apps.star", res.Outcome, res.Error)
		}
	})
	t.Run("absent bundle", func(t *testing.T) {
		res := compose(t, nil)
		if res.Error == nil || res.Error.Terminal || !strings.Contains(res.Error.Message, "config.data is empty") {
			t.Errorf("outcome %+v, error %+v; want a transient error", res.Outcome, res.Error)
		}
	})
}

// zipOf returns a zip of files, by path.
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for name, body := range files {
		fw, err := w.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
