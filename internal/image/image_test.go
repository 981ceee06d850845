package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

var (
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 = v1.Platform{OS: "linux", Architecture: "arm64"}
)

// testConfig is a complete imageConfig for images made of fake binaries.
func testConfig() imageConfig {
	return imageConfig{
		Version: "v1.2.3", Source: "https://github.com/convergeplane/converge",
		Revision: strings.Repeat("ab", 20), Created: time.Unix(1_700_000_000, 0).UTC(),
		CACerts: mozillaRoots(),
	}
}

// testImage assembles cfg with one fake binary for p and returns its image.
func testImage(t *testing.T, cfg imageConfig, p v1.Platform, bin []byte) v1.Image {
	t.Helper()
	idx, err := assemble(cfg, []platformBinary{{Platform: p, Binary: bin}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestInspectFindsBrokenImages gives inspect, the check TestImage runs on
// the real image, a correct image made of a fake binary, then one broken
// copy per rule: it must pass the first and name each break.
func TestInspectFindsBrokenImages(t *testing.T) {
	t.Parallel()
	good := fakeELF("arm64", false, tzdataMarker)
	if got := inspect(testImage(t, testConfig(), arm64, good), arm64); len(got) != 0 {
		t.Fatalf("a correct image: %q", got)
	}
	withConfig := func(edit func(*v1.Config)) func(*testing.T) v1.Image {
		return func(t *testing.T) v1.Image {
			img := testImage(t, testConfig(), arm64, good)
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			cf = cf.DeepCopy()
			edit(&cf.Config)
			img, err = mutate.ConfigFile(img, cf)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	withCfg := func(edit func(*imageConfig), bin []byte) func(*testing.T) v1.Image {
		return func(t *testing.T) v1.Image {
			cfg := testConfig()
			edit(&cfg)
			return testImage(t, cfg, arm64, bin)
		}
	}
	for _, tc := range []struct {
		name, want string
		image      func(*testing.T) v1.Image
	}{
		{"RunsAsRoot", "User", withConfig(func(c *v1.Config) { c.User = "" })},
		{"ShellEntrypoint", "Entrypoint", withConfig(func(c *v1.Config) { c.Entrypoint = []string{"/bin/sh", "-c"} })},
		{"NoHealthPort", "8081/tcp", withConfig(func(c *v1.Config) { delete(c.ExposedPorts, "8081/tcp") })},
		{"NoVersion", labelVersion, withConfig(func(c *v1.Config) { delete(c.Labels, labelVersion) })},
		{"NoSource", labelSource, withConfig(func(c *v1.Config) { delete(c.Labels, labelSource) })},
		{"NoRevision", labelRevision, withConfig(func(c *v1.Config) { c.Labels[labelRevision] = "" })},
		{"Dynamic", "dynamically linked", withCfg(func(*imageConfig) {}, fakeELF("arm64", true, tzdataMarker))},
		{"WrongArchitecture", "EM_X86_64", withCfg(func(*imageConfig) {}, fakeELF("amd64", false, tzdataMarker))},
		{"NoTimeZones", "time zone", withCfg(func(*imageConfig) {}, fakeELF("arm64", false, ""))},
		{"NoCACerts", "ca-certificates.crt", withCfg(func(c *imageConfig) { c.CACerts = nil }, good)},
		{"Shell", "bin/sh", func(t *testing.T) v1.Image {
			l, err := layerOf([]file{{path: "/bin", mode: os.ModeDir | 0o755}, {path: "/bin/sh", mode: 0o755, data: []byte("#!")}}, time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			img, err := mutate.AppendLayers(testImage(t, testConfig(), arm64, good), l)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}},
		{"RDSBundleMissing", labelRDSCA, func(t *testing.T) v1.Image {
			return withConfig(func(c *v1.Config) { c.Labels[labelRDSCA] = "sha256:00" })(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := inspect(tc.image(t), arm64)
			if !strings.Contains(strings.Join(got, "\n"), tc.want) {
				t.Errorf("inspect = %q, want a problem naming %q", got, tc.want)
			}
		})
	}
}

// TestBuildAndPush runs build on fake binaries twice (the same bytes each
// time), then push into go-containerregistry's registry served over real
// HTTP behind basic auth: refused for an image without the RDS CA bundle,
// refused without the password, then pushed and read back by digest.
func TestBuildAndPush(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var binArgs []string
	for _, p := range []v1.Platform{arm64, amd64} {
		path := filepath.Join(dir, "converge-"+p.Architecture)
		if err := os.WriteFile(path, fakeELF(p.Architecture, false, tzdataMarker), 0o755); err != nil {
			t.Fatal(err)
		}
		binArgs = append(binArgs, "-binary", p.String()+"="+path)
	}
	rdsPath := filepath.Join(dir, "rds.pem")
	if err := os.WriteFile(rdsPath, selfSigned(t), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(out string, extra ...string) {
		t.Helper()
		args := append([]string{"build", "-out", out, "-version", "v1.2.3", "-source", "https://example.com/converge",
			"-revision", strings.Repeat("cd", 20), "-created", "1700000000"}, binArgs...)
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), append(args, extra...), &stdout, &stderr, os.Getenv); code != 0 {
			t.Fatalf("build %v: exit %d\n%s%s", extra, code, &stdout, &stderr)
		}
		t.Logf("build %v:\n%s%s", extra, &stdout, &stderr)
	}
	withRDS, again, withoutRDS := filepath.Join(dir, "oci"), filepath.Join(dir, "oci2"), filepath.Join(dir, "oci-nords")
	build(withRDS, "-rds-ca", rdsPath)
	build(again, "-rds-ca", rdsPath)
	build(withoutRDS)
	idx, err := layoutIndex(withRDS)
	if err != nil {
		t.Fatal(err)
	}
	want, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if idx2, err := layoutIndex(again); err != nil {
		t.Fatal(err)
	} else if d, _ := idx2.Digest(); d != want {
		t.Errorf("two builds of the same inputs: index %s then %s", want, d)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if got := inspect(img, *desc.Platform); len(got) != 0 {
			t.Errorf("%s: %q", desc.Platform, got)
		}
	}

	const user, password = "AWS", "s3cret"
	reg := registry.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/converge:v1.2.3"
	env := map[string]string{"IMAGE_PASSWORD": password}
	push := func(env map[string]string, args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"push", "-image", ref}, args...), &stdout, &stderr, func(k string) string { return env[k] })
		return code, stdout.String() + stderr.String()
	}
	if code, out := push(env, "-layout", withoutRDS); code == 0 || !strings.Contains(out, "RDS CA bundle") {
		t.Errorf("push of an image without the RDS CA bundle: exit %d, want a refusal naming it:\n%s", code, out)
	}
	// Without IMAGE_PASSWORD the default keychain has nothing for this
	// fresh loopback registry: the registry refuses the push.
	if code, out := push(map[string]string{}, "-layout", withRDS); code == 0 || !strings.Contains(out, "401") {
		t.Errorf("push without IMAGE_PASSWORD: exit %d, want 401 Unauthorized:\n%s", code, out)
	}
	code, out := push(env, "-layout", withRDS)
	if code != 0 {
		t.Fatalf("push: exit %d\n%s", code, out)
	}
	digestRef := strings.TrimPrefix(srv.URL, "http://") + "/converge@" + want.String()
	if !strings.Contains(out, digestRef) {
		t.Errorf("push printed %q, want the digest reference %s", out, digestRef)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(tag, remote.WithAuth(&authn.Basic{Username: user, Password: password}))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := pulled.Digest(); d != want {
		t.Errorf("the registry's %s is index %s, want the pushed %s", ref, d, want)
	}
	img, err := pulled.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if got := inspect(img, *m.Manifests[0].Platform); len(got) != 0 {
		t.Errorf("pulled %s: %q", m.Manifests[0].Platform, got)
	}
	if code, out := push(env, "-layout", withoutRDS, "-allow-no-rds-ca"); code != 0 {
		t.Errorf("push -allow-no-rds-ca: exit %d\n%s", code, out)
	}
}

// TestBuildRefusesDynamicBinary: a binary that needs a loader cannot run on
// the empty base, so build stops there rather than write the image.
func TestBuildRefusesDynamicBinary(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "converge")
	if err := os.WriteFile(path, fakeELF("amd64", true, ""), 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"build", "-out", filepath.Join(t.TempDir(), "oci"), "-binary", "linux/amd64=" + path,
		"-version", "v", "-source", "s", "-revision", "r", "-created", "0"}, &bytes.Buffer{}, &stderr, os.Getenv)
	if code == 0 || !strings.Contains(stderr.String(), "dynamically linked") {
		t.Errorf("build of a dynamic binary: exit %d, stderr %q; want a refusal", code, &stderr)
	}
}

// selfSigned returns a PEM certificate standing in for the RDS CA bundle.
func selfSigned(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test RDS root"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(4_000_000_000, 0), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
