package webhooksdk_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/protocol"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestProtocolDocExample keeps docs/protocol.md's worked example honest: its signatures
// verify, its documents decode into this package's types without unknown fields, the
// envelope is byte-for-byte what the Go types encode, and a Handler fed the example
// request answers with the example's inline body.
func TestProtocolDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatalf("read protocol doc: %v", err)
	}
	const ts = 1767225600
	body := []byte(docBlock(t, doc, "body"))
	msgHeaders, _ := splitHTTP(t, docBlock(t, doc, "headers"))

	t.Run("body", func(t *testing.T) {
		if got, want := msgHeaders.Get("Content-Length"), strconv.Itoa(len(body)); got != want {
			t.Errorf("Content-Length %s, body is %s bytes", got, want)
		}
		env := decodeStrict[webhooksdk.Envelope](t, body)
		again, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, body) {
			t.Errorf("Envelope re-encodes differently:\n doc: %s\n  go: %s", body, again)
		}
	})

	t.Run("signature", func(t *testing.T) {
		secrets := []webhooksdk.Secret{mustSecret(t, vectorSecret)}
		if err := webhooksdk.Verify(secrets, msgHeaders, body, time.Unix(ts, 0), 0); err != nil {
			t.Fatalf("doc signature does not verify: %v", err)
		}
		if got := webhooksdk.Sign(secrets[0], msgHeaders.Get(webhooksdk.HeaderID), time.Unix(ts, 0), body); got != msgHeaders.Get(webhooksdk.HeaderSignature) {
			t.Errorf("doc signature %q, Sign gives %q", msgHeaders.Get(webhooksdk.HeaderSignature), got)
		}
	})

	t.Run("rotation", func(t *testing.T) {
		rot := strings.TrimPrefix(docBlock(t, doc, "rotation"), "webhook-signature: ")
		signer, err := webhooksdk.NewSigner(vectorSecret, otherSecret)
		if err != nil {
			t.Fatal(err)
		}
		if got := signer.Sign(msgHeaders.Get(webhooksdk.HeaderID), time.Unix(ts, 0), body); got != rot {
			t.Errorf("doc rotation header %q, Signer gives %q", rot, got)
		}
	})

	t.Run("health", func(t *testing.T) {
		h, hbody := splitHTTP(t, docBlock(t, doc, "health"))
		if err := webhooksdk.Verify([]webhooksdk.Secret{mustSecret(t, vectorSecret)}, h, []byte(hbody), time.Unix(ts, 0), 0); err != nil {
			t.Fatalf("doc health probe does not verify: %v", err)
		}
	})

	t.Run("callback", func(t *testing.T) {
		env := decodeStrict[webhooksdk.Envelope](t, body)
		block := docBlock(t, doc, "callback")
		h, cbBody := splitHTTP(t, block)
		if got, want := h.Get("Authorization"), "Bearer "+env.Callback.Token; got != want {
			t.Errorf("Authorization %q, want %q", got, want)
		}
		u, err := url.Parse(env.Callback.URL)
		if err != nil {
			t.Fatal(err)
		}
		if first := strings.SplitN(block, "\n", 2)[0]; first != "POST "+u.Path+" HTTP/1.1" {
			t.Errorf("request line %q does not POST the callback path %s", first, u.Path)
		}
		r := decodeStrict[webhooksdk.Result](t, []byte(cbBody))
		if r.TaskID != env.TaskID || r.ClaimEpoch != env.ClaimEpoch || r.Error == nil || !r.Error.Terminal {
			t.Errorf("callback Result %+v does not echo the task with a terminal error", r)
		}
	})

	t.Run("handler answers the inline example", func(t *testing.T) {
		_, inlineBody := splitHTTP(t, docBlock(t, doc, "inline"))
		want := decodeStrict[webhooksdk.Result](t, []byte(inlineBody))
		p := newFake(webhooksdk.KindVersion{Kind: "vpc", Version: 1}, func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
			return *want.Outcome, nil
		})
		ep, err := webhooksdk.Handler([]webhooksdk.Provider{p},
			webhooksdk.WithSecrets(vectorSecret),
			webhooksdk.WithClock(func() time.Time { return time.Unix(ts, 0) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := ep.Shutdown(context.WithoutCancel(t.Context())); err != nil {
				t.Error(err)
			}
		})
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/converge", bytes.NewReader(body))
		for k, v := range msgHeaders {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Body.String() != inlineBody {
			t.Fatalf("Handler answered %d %s\nwant 200 %s", rec.Code, rec.Body, inlineBody)
		}
	})
}

// TestProtocolDocExamplesMatchSchemas: every JSON document of docs/protocol.md's worked
// examples (§13, §16.6) validates against its schema in protocol/schema.
func TestProtocolDocExamplesMatchSchemas(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatalf("read protocol doc: %v", err)
	}
	schemas, err := protocol.LoadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	httpBody := func(name string) string {
		_, body := splitHTTP(t, docBlock(t, doc, name))
		return body
	}
	for _, ex := range []struct{ example, schema, body string }{
		{"body", protocol.SchemaEnvelope, docBlock(t, doc, "body")},
		{"inline", protocol.SchemaResult, httpBody("inline")},
		{"callback", protocol.SchemaResult, httpBody("callback")},
		{"health", protocol.SchemaHealthRequest, httpBody("health")},
		{"batch-request", protocol.SchemaBatchRequest, docBlock(t, doc, "batch-request")},
		{"batch-response", protocol.SchemaBatchResponse, httpBody("batch-response")},
	} {
		if err := schemas.Validate(ex.schema, []byte(ex.body)); err != nil {
			t.Errorf("example:%s: %v\n%s", ex.example, err, ex.body)
		}
	}
}

// docBlock returns the fenced code block that follows "<!-- example:name -->".
func docBlock(t *testing.T, doc []byte, name string) string {
	t.Helper()
	marker := "<!-- example:" + name + " -->"
	_, rest, ok := strings.Cut(string(doc), marker)
	if !ok {
		t.Fatalf("protocol doc has no %s", marker)
	}
	_, rest, ok = strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("no code block after %s", marker)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the info string
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("unterminated code block after %s", marker)
	}
	return strings.TrimSuffix(block, "\n")
}

// splitHTTP parses a documented HTTP message: a start line, headers, a blank line, a body.
func splitHTTP(t *testing.T, block string) (http.Header, string) {
	t.Helper()
	head, body, _ := strings.Cut(block, "\n\n")
	h := http.Header{}
	sc := bufio.NewScanner(strings.NewReader(head))
	first := true
	for sc.Scan() {
		if first {
			first = false
			if !strings.Contains(sc.Text(), "HTTP/1.1") {
				t.Fatalf("start line %q", sc.Text())
			}
			continue
		}
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			t.Fatalf("header line %q", sc.Text())
		}
		h.Add(k, v)
	}
	return h, body
}

func decodeStrict[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, b)
	}
	return v
}
