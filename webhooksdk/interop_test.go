package webhooksdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/testkit/nodetest"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestInteropStandardWebhooksNPM checks this package against the official
// `standardwebhooks` npm package (pinned in interop/package.json): Go-signed requests
// verify in Node, Node-signed requests verify in Go, and a tampered body fails in both.
// It needs node and npm on PATH (they are part of the development machine and CI) and
// runs `npm ci` in interop/ when node_modules is missing or older than its lock file.
func TestInteropStandardWebhooksNPM(t *testing.T) {
	node := nodetest.LookPath(t, "node")
	dir, err := filepath.Abs("interop")
	if err != nil {
		t.Fatal(err)
	}
	nodetest.NPMCI(t, dir)

	secrets := []string{vectorSecret, otherSecret}
	// Non-ASCII and JSON-escaped content: the body travels as a string through Node.
	body := []byte(`{"type":"task","task_id":"t-1","note":"héllo ✓ \"quoted\" \\ back"}`)
	tampered := append(bytes.Clone(body[:len(body)-1]), []byte(`,"x":1}`)...)

	for i, secret := range secrets {
		t.Run("secret"+strconv.Itoa(i)+"/go signs node verifies", func(t *testing.T) {
			signer, err := webhooksdk.NewSigner(secret)
			if err != nil {
				t.Fatal(err)
			}
			h := http.Header{}
			signer.SetHeaders(h, "msg_go_"+strconv.FormatInt(time.Now().UnixNano(), 36), time.Now(), body)
			if ok, out := nodeVerify(t, node, dir, secret, h, body); !ok {
				t.Fatalf("node rejected a Go signature: %s", out)
			}
			if ok, _ := nodeVerify(t, node, dir, secret, h, tampered); ok {
				t.Fatal("node accepted a tampered body")
			}
		})
		t.Run("secret"+strconv.Itoa(i)+"/node signs go verifies", func(t *testing.T) {
			msgID := "msg_node_" + strconv.FormatInt(time.Now().UnixNano(), 36)
			ts := time.Now()
			h := nodeSign(t, node, dir, secret, msgID, ts, body)
			sec := mustSecret(t, secret)
			if err := webhooksdk.Verify([]webhooksdk.Secret{sec}, h, body, time.Now(), 0); err != nil {
				t.Fatalf("Go rejected a Node signature: %v", err)
			}
			if got, want := h.Get(webhooksdk.HeaderSignature), webhooksdk.Sign(sec, msgID, ts, body); got != want {
				t.Fatalf("node signature %q, Go signature %q", got, want)
			}
			if err := webhooksdk.Verify([]webhooksdk.Secret{sec}, h, tampered, time.Now(), 0); !errors.Is(err, webhooksdk.ErrNoMatchingSignature) {
				t.Fatalf("Go on a tampered body: %v, want ErrNoMatchingSignature", err)
			}
		})
	}

	t.Run("rotation header verifies in node", func(t *testing.T) {
		signer, err := webhooksdk.NewSigner(otherSecret, vectorSecret)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		signer.SetHeaders(h, "msg_rot", time.Now(), body)
		for _, secret := range secrets {
			if ok, out := nodeVerify(t, node, dir, secret, h, body); !ok {
				t.Fatalf("node rejected a rotation header for one of its secrets: %s", out)
			}
		}
	})

	t.Run("spec vector signed by node", func(t *testing.T) {
		h := nodeSign(t, node, dir, vectorSecret, vectorMsgID, time.Unix(vectorTimestamp, 0), []byte(vectorBody))
		if got := h.Get(webhooksdk.HeaderSignature); got != vectorSignature {
			t.Fatalf("node signs the vector as %q, want %q", got, vectorSignature)
		}
	})
}

func runNode(t *testing.T, node, dir, script string, input any) ([]byte, error) {
	t.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("run node %s: %v\n%s", script, err, stderr.Bytes())
		}
		return stderr.Bytes(), err
	}
	return stdout.Bytes(), nil
}

func nodeVerify(t *testing.T, node, dir, secret string, h http.Header, body []byte) (bool, string) {
	t.Helper()
	out, err := runNode(t, node, dir, "verify.mjs", map[string]any{
		"secret": secret,
		"headers": map[string]string{
			webhooksdk.HeaderID:        h.Get(webhooksdk.HeaderID),
			webhooksdk.HeaderTimestamp: h.Get(webhooksdk.HeaderTimestamp),
			webhooksdk.HeaderSignature: h.Get(webhooksdk.HeaderSignature),
		},
		"body": string(body),
	})
	return err == nil, string(out)
}

func nodeSign(t *testing.T, node, dir, secret, msgID string, ts time.Time, body []byte) http.Header {
	t.Helper()
	out, err := runNode(t, node, dir, "sign.mjs", map[string]any{
		"secret": secret, "msg_id": msgID, "timestamp": ts.Unix(), "body": string(body),
	})
	if err != nil {
		t.Fatalf("node sign.mjs: %v: %s", err, out)
	}
	var hs map[string]string
	if err := json.Unmarshal(out, &hs); err != nil {
		t.Fatalf("node sign.mjs output %q: %v", out, err)
	}
	h := http.Header{}
	for k, v := range hs {
		h.Set(k, v)
	}
	return h
}
