package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/providers/stdterraform"
)

// TestStdTerraformSources drives stdterraform's fetched module sources through the REST
// API: a resource whose module is a .tar.gz on a local HTTPS server (its //subdir, a
// matching ?checksum=) converges with the module's outputs; one whose checksum does not
// match fails terminally naming spec.source; a source or a source limit the manifest's
// schemas refuse is a 400 naming the field.
func TestStdTerraformSources(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skipf("no terraform binary in PATH (%v): stdterraform runs a real one", err)
	}
	archive := tarGzModule(t, "pkg/mod/main.tf", "output \"from\" {\n  value = \"https\"\n}\n")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/mod.tar.gz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(archive)
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	must(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	s := startAll(t)
	if code, body := s.call("PUT", "/kinds/stdterraform/manifest", json.RawMessage(stdterraform.Manifest())); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	s.serveProvider("stdterraform", stdterraform.New("stdterraform", stdterraform.WithCAFile(ca)))
	if code, body := s.call("POST", "/providerconfigs", map[string]any{"name": "stdterraform-default", "kind": "stdterraform",
		"kind_version": 1, "is_default": true, "spec": map[string]any{"state_dir": t.TempDir(), "source_limits": map[string]any{"files": 0}}}); code != 400 || !strings.Contains(string(body), "source_limits") {
		t.Errorf("source_limits.files 0 = %d %s, want a problem naming source_limits", code, body)
	}
	if code, body := s.call("POST", "/providerconfigs", map[string]any{"name": "stdterraform-default", "kind": "stdterraform",
		"kind_version": 1, "is_default": true, "spec": map[string]any{"state_dir": t.TempDir(), "source_limits": map[string]any{"files": 100}}}); code != 201 {
		t.Fatalf("providerconfig = %d %s", code, body)
	}

	sum := sha256.Sum256(archive)
	good := srv.URL + "/mod.tar.gz//pkg/mod?checksum=sha256:" + hex.EncodeToString(sum[:])
	for name, source := range map[string]string{"fetched": good, "mismatched": srv.URL + "/mod.tar.gz//pkg/mod?checksum=sha256:" + strings.Repeat("0", 64)} {
		if code, body := s.call("POST", "/resources", map[string]any{"kind": "stdterraform", "kind_version": 1, "name": name,
			"spec": map[string]any{"source": source}}); code != 201 {
			t.Fatalf("apply %s = %d %s", name, code, body)
		}
	}
	waitFor(t, 60*time.Second, "stdterraform/fetched Ready", func() bool {
		d, _ := s.detail("stdterraform/fetched")
		return d.PhaseOf() == model.PhaseReady
	})
	d, _ := s.detail("stdterraform/fetched")
	if !strings.Contains(string(d.Status), `"from":"https"`) {
		t.Errorf("status = %s, want the fetched module's output", d.Status)
	}
	waitFor(t, 60*time.Second, "stdterraform/mismatched Failed terminally", func() bool {
		d, _ := s.detail("stdterraform/mismatched")
		return d.PhaseOf() == model.PhaseFailed && d.Task == nil && strings.Contains(d.LastError, "spec.source") && strings.Contains(d.LastError, "sha256")
	})

	for _, source := range []string{"http://example.com/mod.tar.gz", "ftp://example.com/mod.tar.gz", "modules/hello"} {
		code, body := s.call("POST", "/resources", map[string]any{"kind": "stdterraform", "kind_version": 1, "name": "bad",
			"spec": map[string]any{"source": source}})
		if code != 400 || !strings.Contains(string(body), "/spec/source") {
			t.Errorf("source %q = %d %s, want a problem naming /spec/source", source, code, body)
		}
	}
	s.checkInvariants()
}

// tarGzModule is a .tar.gz holding one file.
func tarGzModule(t *testing.T, name, body string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	must(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}))
	_, err := tw.Write([]byte(body))
	must(t, err)
	must(t, tw.Close())
	must(t, gz.Close())
	return buf.Bytes()
}
