package stdterraform

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// entry is one archive entry; typ 0 is a regular file.
type entry struct {
	name, body string
	typ        byte
	link       string
	mode       int64
}

// outputModule is a module whose one output says where it came from.
func outputModule(from string) string {
	return "output \"from\" {\n  value = \"" + from + "\"\n}\n"
}

// tarGz packs entries as a .tar.gz.
func tarGz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body))}
		if e.mode != 0 {
			h.Mode = e.mode
		}
		switch e.typ {
		case 0:
			h.Typeflag = tar.TypeReg
		case tar.TypeDir:
			h.Mode = 0o755
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zipOf packs regular files as a .zip.
func zipOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.Create(e.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// tlsServer serves files over HTTPS and returns its URL and a CA file trusting it.
func tlsServer(t *testing.T, files map[string][]byte) (string, string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/signed" && r.URL.RawQuery == "sig=a%2Fb&exp=1" { // a presigned URL, as written
			r.URL.Path = "/mod.tar.gz"
		}
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://"+r.Host+"/mod.tar.gz", http.StatusFound)
			return
		}
		body, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	writeCA(t, srv, ca)
	return srv.URL, ca
}

// pemCert is a DER certificate in PEM.
func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// sourceRequest is an apply of source, with config's fields beside state_dir.
func sourceRequest(t *testing.T, source string, cfg map[string]any) webhooksdk.Request {
	t.Helper()
	req := request(t, reactionApply, t.TempDir(), map[string]any{"source": source})
	if cfg != nil {
		var base map[string]any
		if err := json.Unmarshal(req.Config, &base); err != nil {
			t.Fatal(err)
		}
		for k, v := range cfg {
			base[k] = v
		}
		var err error
		if req.Config, err = json.Marshal(base); err != nil {
			t.Fatal(err)
		}
	}
	return req
}

// wantFrom applies source and checks the module's "from" output.
func wantFrom(t *testing.T, p webhooksdk.Provider, source, from string) {
	t.Helper()
	out, err := sdktest.Run(t, p, sourceRequest(t, source, nil))
	if err != nil {
		t.Fatalf("apply %s: %v", source, err)
	}
	var st struct {
		Outputs map[string]any `json:"outputs"`
	}
	if err := json.Unmarshal(out.Status, &st); err != nil || st.Outputs["from"] != from {
		t.Fatalf("apply %s: status %s (%v), want from = %q", source, out.Status, err, from)
	}
}

// failure is a source that must fail, and how.
type failure struct {
	name, source string
	cfg          map[string]any
	terminal     bool
	want         string
}

func checkFailures(t *testing.T, p webhooksdk.Provider, cases []failure) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sdktest.Run(t, p, sourceRequest(t, tc.source, tc.cfg))
			if err == nil {
				t.Fatal("no error")
			}
			if webhooksdk.IsTerminal(err) != tc.terminal || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "spec.source") {
				t.Errorf("error (terminal %v) = %v; want terminal %v naming spec.source and %q", webhooksdk.IsTerminal(err), err, tc.terminal, tc.want)
			}
		})
	}
}

// TestHTTPSSource applies modules fetched over HTTPS from a local TLS server the
// provider trusts through WithCAFile: a .tar.gz and a .zip, a //subdir, a matching
// ?checksum=, a presigned URL's query passed as written. Then the failures: a 404 and
// an untrusted server are transient; a redirect to plain http, a wrong checksum, a path
// or link leaving the module, a device file, a zip bomb past the caps and a file that
// is no archive are terminal.
func TestHTTPSSource(t *testing.T) {
	needTerraform(t)
	good := tarGz(t, entry{name: "pkg/", typ: tar.TypeDir}, entry{name: "pkg/mod/main.tf", body: outputModule("tar")},
		entry{name: "pkg/other/main.tf", body: "this is not terraform"})
	files := map[string][]byte{
		"/mod.tar.gz":  good,
		"/mod.zip":     zipOf(t, entry{name: "main.tf", body: outputModule("zip")}),
		"/dotdot.tgz":  tarGz(t, entry{name: "main.tf", body: outputModule("x")}, entry{name: "../escape.tf", body: "x"}),
		"/abs.tgz":     tarGz(t, entry{name: "/etc/escape.tf", body: "x"}),
		"/symlink.tgz": tarGz(t, entry{name: "main.tf", body: outputModule("x")}, entry{name: "passwd", typ: tar.TypeSymlink, link: "/etc/passwd"}),
		"/hardlink.tgz": tarGz(t, entry{name: "main.tf", body: outputModule("x")},
			entry{name: "passwd", typ: tar.TypeLink, link: "../../etc/passwd"}),
		"/device.tgz":  tarGz(t, entry{name: "main.tf", body: outputModule("x")}, entry{name: "null", typ: tar.TypeChar}),
		"/dotdot.zip":  zipOf(t, entry{name: "main.tf", body: outputModule("x")}, entry{name: "a/../../escape.tf", body: "x"}),
		"/bomb.tgz":    tarGz(t, entry{name: "main.tf", body: outputModule("x")}, entry{name: "zeros", body: strings.Repeat("\x00", 1<<20)}),
		"/bomb.zip":    zipOf(t, entry{name: "main.tf", body: outputModule("x")}, entry{name: "zeros", body: strings.Repeat("\x00", 1<<20)}),
		"/plain.txt":   []byte("hello, not an archive"),
		"/corrupt.tgz": good[:len(good)/2],
	}
	base, ca := tlsServer(t, files)
	p := New("stdterraform", WithCAFile(ca))

	wantFrom(t, p, base+"/mod.tar.gz//pkg/mod", "tar")
	wantFrom(t, p, base+"/mod.tar.gz//pkg/mod?checksum=sha256:"+sha256Hex(good), "tar")
	wantFrom(t, p, base+"/mod.zip", "zip")
	wantFrom(t, p, base+"/signed//pkg/mod?sig=a%2Fb&exp=1", "tar")

	wrong := strings.Repeat("0", 64)
	small := map[string]any{"source_limits": map[string]any{"module_bytes": 1 << 19}}
	checkFailures(t, p, []failure{
		{"not found", base + "/missing.tar.gz", nil, false, "404 Not Found"},
		{"redirect to http", base + "/redirect", nil, true, "leaves https"},
		{"wrong checksum", base + "/mod.tar.gz//pkg/mod?checksum=sha256:" + wrong, nil, true, "sha256 (?checksum=) is " + sha256Hex(good)},
		{"bad checksum syntax", base + "/mod.tar.gz?checksum=md5:abc", nil, true, "not sha256:"},
		{"plain http", "http://example.com/mod.tar.gz", nil, true, "plain http"},
		{"unknown scheme", "ftp://example.com/mod.tar.gz", nil, true, "want an absolute path"},
		{"credentials", "https://user:pw@example.com/mod.tar.gz", nil, true, "credentials"},
		{"subdir escape", base + "/mod.tar.gz//../x", nil, true, "not a directory inside"},
		{"missing subdir", base + "/mod.tar.gz//pkg/nope", nil, true, "no directory //pkg/nope"},
		{"dotdot", base + "/dotdot.tgz", nil, true, `climbs out with ".."`},
		{"dotdot zip", base + "/dotdot.zip", nil, true, `climbs out with ".."`},
		{"absolute", base + "/abs.tgz", nil, true, "absolute path"},
		{"symlink out", base + "/symlink.tgz", nil, true, "is a link (to /etc/passwd)"},
		{"hardlink out", base + "/hardlink.tgz", nil, true, "is a link (to ../../etc/passwd)"},
		{"device", base + "/device.tgz", nil, true, "not a file or directory"},
		{"tar bomb", base + "/bomb.tgz", small, true, "module_bytes"},
		{"zip bomb", base + "/bomb.zip", small, true, "module_bytes"},
		{"archive cap", base + "/mod.tar.gz", map[string]any{"source_limits": map[string]any{"archive_bytes": 64}}, true, "archive_bytes"},
		{"files cap", base + "/mod.tar.gz", map[string]any{"source_limits": map[string]any{"files": 2}}, true, "source_limits.files"},
		{"not an archive", base + "/plain.txt", nil, true, "not a .tar.gz or a .zip"},
		{"corrupt", base + "/corrupt.tgz", nil, true, "module refused"},
	})
	checkFailures(t, New("stdterraform"), []failure{{"untrusted server", base + "/mod.tar.gz", nil, false, "certificate"}})

	// archive/tar and archive/zip flag such names themselves under these settings; the
	// refusal still names the entry.
	t.Setenv("GODEBUG", "tarinsecurepath=0,zipinsecurepath=0")
	checkFailures(t, p, []failure{
		{"dotdot insecurepath", base + "/dotdot.tgz", nil, true, `climbs out with ".."`},
		{"dotdot zip insecurepath", base + "/dotdot.zip", nil, true, `climbs out with ".."`},
		{"absolute insecurepath", base + "/abs.tgz", nil, true, "absolute path"},
	})
}

// writeCA writes a PEM file trusting srv.
func writeCA(t *testing.T, srv *httptest.Server, path string) {
	t.Helper()
	if err := os.WriteFile(path, pemCert(srv.Certificate().Raw), 0o600); err != nil {
		t.Fatal(err)
	}
}
