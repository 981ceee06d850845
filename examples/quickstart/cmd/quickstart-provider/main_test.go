package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/examples/quickstart/provider"
)

// TestPrintObjects checks what `quickstart-provider objects` gives
// `converge dev --demo`: the kinds this provider serves, leaves before the
// composite, and a site to apply.
func TestPrintObjects(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := printObjects(&buf); err != nil {
		t.Fatal(err)
	}
	var o Objects
	if err := json.Unmarshal(buf.Bytes(), &o); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.Bytes())
	}
	type ref struct {
		Kind        string `json:"kind"`
		KindVersion int    `json:"kind_version"`
		Name        string `json:"name,omitempty"`
	}
	refs := func(raws []json.RawMessage) []ref {
		var out []ref
		for _, r := range raws {
			var x ref
			if err := json.Unmarshal(r, &x); err != nil {
				t.Fatal(err)
			}
			out = append(out, x)
		}
		return out
	}
	if diff := cmp.Diff([]ref{{"bucket", 1, ""}, {"cdn", 1, ""}, {"site", 1, ""}}, refs(o.Manifests)); diff != "" {
		t.Errorf("manifests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]ref{{"site", 1, "shop"}}, refs(o.Resources)); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
}

// TestAdminSwitch drives the readiness switch over HTTP: POST /ready/{kind}
// and /unready/{kind} switch the kind, an unknown kind is 404, and a
// non-loopback address is refused.
func TestAdminSwitch(t *testing.T) {
	t.Parallel()
	ready, err := provider.ParseUnready("cdn")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(adminHandler(ready, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	call := func(method, path string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	for _, c := range []struct{ method, path, want string }{
		{"GET", "/ready", `{"unready":["cdn"]}`},
		{"POST", "/unready/bucket", `{"unready":["bucket","cdn"]}`},
		{"POST", "/ready/cdn", `{"unready":["bucket"]}`},
		{"POST", "/ready/bucket", `{"unready":[]}`},
	} {
		if code, body := call(c.method, c.path); code != http.StatusOK || body != c.want {
			t.Errorf("%s %s = %d %s, want 200 %s", c.method, c.path, code, body, c.want)
		}
	}
	if !ready.Ready("cdn") || !ready.Ready("bucket") {
		t.Error("the switch did not make cdn and bucket ready")
	}
	if code, _ := call("POST", "/unready/vpc"); code != http.StatusNotFound {
		t.Errorf("POST /unready/vpc = %d, want 404", code)
	}
	if _, err := serveAdmin(t.Context(), "0.0.0.0:0", ready, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("ADMIN_ADDR=0.0.0.0:0 was accepted")
	}
}
