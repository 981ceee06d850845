package stdstarlark

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"testing"

	"go.starlark.net/starlark"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// file is one entry of a test zip.
type file struct{ name, body string }

// zipOf returns a zip bundle of files, in order, deflated as `zip` does.
func zipOf(t *testing.T, files ...file) []byte {
	t.Helper()
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for _, f := range files {
		fw, err := w.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// composeBundle runs compose with bundle and returns the error.
func composeBundle(t *testing.T, bundle []byte) error {
	t.Helper()
	_, err := sdktest.Run(t, New("stdstarlark"), request("compose", string(bundle), `{"name":"shop"}`))
	return err
}

// wantTerminal fails t unless err is terminal and contains each of want.
func wantTerminal(t *testing.T, err error, want ...string) {
	t.Helper()
	if !webhooksdk.IsTerminal(err) {
		t.Fatalf("err = %v; want terminal", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err = %v; want it to contain %q", err, w)
		}
	}
}

// netLib is a module in a subdirectory that itself loads a module by its path from the
// bundle's root.
const netLib = `
load("names.star", "name_of")

def network(spec, cidr):
    return struct(kind = "fakevpc", kind_version = 1, name = name_of(spec, "vpc"), spec = {"cidr": cidr})
`

const namesLib = `
def name_of(spec, what):
    return spec["name"] + "-" + what
`

const bundleCompose = `
load("lib/net.star", "network")
load("names.star", "name_of")

def compose(spec, config):
    vpc = network(spec, config["cidr"])
    return struct(children = [vpc, struct(kind = "fakeapp", kind_version = 1, name = name_of(spec, "app"))])
`

func TestBundleLoadsModules(t *testing.T) {
	bundle := zipOf(t, file{"lib/", ""}, file{"lib/net.star", netLib}, file{"names.star", namesLib},
		file{"README.md", "how to build this bundle"}, file{"compose.star", bundleCompose})
	out, err := sdktest.Run(t, New("stdstarlark"), request("compose", string(bundle), `{"name":"shop"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Children) != 2 || out.Children[0].Name != "shop-vpc" || string(out.Children[0].Spec) != `{"cidr":"10.1.0.0/16"}` ||
		out.Children[1].Name != "shop-app" {
		t.Errorf("children = %+v; want shop-vpc with the config's cidr and shop-app", out.Children)
	}
}

// TestModuleRunsOnce: names.star, loaded by compose.star and by lib/net.star, runs once
// per compile: both see the same (frozen) list.
func TestModuleRunsOnce(t *testing.T) {
	l := newLoader(map[string][]byte{
		rootModule:     []byte("load(\"names.star\", a = \"seen\")\nload(\"lib/net.star\", b = \"net_seen\")\npair = (a, b)\n"),
		"lib/net.star": []byte("load(\"names.star\", \"seen\")\nnet_seen = seen\n"),
		"names.star":   []byte("seen = []\n"),
	})
	th := &starlark.Thread{Load: l.load}
	g, err := l.run(th, rootModule)
	if err != nil {
		t.Fatal(err)
	}
	pair := g["pair"].(starlark.Tuple)
	if pair[0] != pair[1] {
		t.Error("names.star ran twice: compose.star and lib/net.star got different lists")
	}
}

// TestSingleFileIsABundleOfOne: data that is not a zip is compose.star itself, and a
// load from it finds no other module.
func TestSingleFileIsABundleOfOne(t *testing.T) {
	if err := composeBundle(t, []byte("def compose(spec, config):\n    return {}\n")); err != nil {
		t.Fatalf("single file: %v", err)
	}
	err := composeBundle(t, []byte("load(\"lib.star\", \"helper\")\ndef compose(spec, config):\n    return {}\n"))
	wantTerminal(t, err, "compose.star:1:1", "cannot load lib.star: no lib.star in the bundle")
}

func TestBadLoadsAreNamed(t *testing.T) {
	const body = "\ndef compose(spec, config):\n    return {}\n"
	for _, tc := range []struct {
		name  string
		files []file
		want  []string
	}{
		{"missing module", []file{{"compose.star", `load("lib/net.star", "network")` + body}},
			[]string{"compose.star:1:1", "no lib/net.star in the bundle"}},
		{"missing from a module", []file{{"compose.star", `load("a.star", "f")` + body}, {"a.star", "load(\"gone.star\", \"g\")\nf = 1\n"}},
			[]string{"cannot load a.star: a.star:1:1", "no gone.star in the bundle"}},
		{"parent path", []file{{"compose.star", `load("../secret.star", "x")` + body}},
			[]string{"cannot load ../secret.star", `a path with ".."`}},
		{"parent inside", []file{{"compose.star", `load("lib/../names.star", "x")` + body}, {"names.star", "x = 1\n"}},
			[]string{`a path with ".."`}},
		{"absolute path", []file{{"compose.star", `load("/etc/passwd.star", "x")` + body}},
			[]string{"cannot load /etc/passwd.star: an absolute path"}},
		{"not star", []file{{"compose.star", `load("lib.py", "x")` + body}},
			[]string{"cannot load lib.py: not a .star file"}},
		{"cycle", []file{{"compose.star", `load("a.star", "f")` + body}, {"a.star", "load(\"b.star\", \"g\")\nf = 1\n"}, {"b.star", "load(\"a.star\", \"f\")\ng = 1\n"}},
			[]string{"a load cycle: a.star loads b.star loads a.star"}},
		{"self", []file{{"compose.star", `load("compose.star", "compose")` + body}},
			[]string{"a load cycle: compose.star loads compose.star"}},
		{"syntax in a module", []file{{"compose.star", `load("lib.star", "f")` + body}, {"lib.star", "def f()\n    pass\n"}},
			[]string{"cannot load lib.star: lib.star:2:1: got newline, want ':'"}},
		{"runtime in a module", []file{{"compose.star", "load(\"lib/net.star\", \"f\")\ndef compose(spec, config):\n    return f()\n"}, {"lib/net.star", "def f():\n    return {}[\"k\"]\n"}},
			[]string{`lib/net.star:2:14: in f: key "k" not in dict`}},
		{"no such symbol", []file{{"compose.star", `load("lib.star", "nope")` + body}, {"lib.star", "f = 1\n"}},
			[]string{"name nope not found in module lib.star"}},
		{"steps in a module", []file{{"compose.star", `load("lib.star", "f")` + body}, {"lib.star", "f = 0\nwhile True:\n    f += 1\n"}},
			[]string{"lib.star:", fmt.Sprintf("step limit of %d exceeded", MaxSteps)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantTerminal(t, composeBundle(t, zipOf(t, tc.files...)), tc.want...)
		})
	}
}

func TestMalformedBundlesAreTerminal(t *testing.T) {
	compose := file{"compose.star", "def compose(spec, config):\n    return {}\n"}
	symlink := func() []byte {
		var b bytes.Buffer
		w := zip.NewWriter(&b)
		h := &zip.FileHeader{Name: "lib.star"}
		h.SetMode(fs.ModeSymlink | 0o777)
		fw, _ := w.CreateHeader(h)
		_, _ = fw.Write([]byte("/etc/passwd"))
		cw, _ := w.Create(compose.name)
		_, _ = cw.Write([]byte(compose.body))
		_ = w.Close()
		return b.Bytes()
	}()
	for _, tc := range []struct {
		name   string
		bundle []byte
		want   []string
	}{
		{"not a zip", append([]byte("PK\x03\x04"), bytes.Repeat([]byte{0xff}, 64)...), []string{"config.data: not a readable zip bundle"}},
		{"empty zip", zipOf(t), []string{"config.data: the zip bundle has no compose.star at its root"}},
		{"compose.star not at the root", zipOf(t, file{"app/compose.star", compose.body}), []string{"no compose.star at its root"}},
		{"parent entry", zipOf(t, compose, file{"../evil.star", "x = 1\n"}), []string{`entry "../evil.star": a path with ".."`}},
		{"absolute entry", zipOf(t, compose, file{"/abs.star", "x = 1\n"}), []string{`entry "/abs.star": an absolute path`}},
		{"parent in a skipped file", zipOf(t, compose, file{"docs/../../x.md", ""}), []string{`entry "docs/../../x.md"`}},
		{"duplicate", zipOf(t, compose, compose), []string{"compose.star: in the zip twice"}},
		{"symlink", symlink, []string{"lib.star: not a regular file"}},
		{"syntax", zipOf(t, file{"compose.star", "def compose(spec, config)\n    return {}\n"}), []string{"compose.star:2:1: got newline, want ':'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantTerminal(t, composeBundle(t, tc.bundle), tc.want...)
		})
	}
}

// deflated returns n zero bytes, deflated: a zip bomb's payload (about a thousandth of
// n).
func deflated(t *testing.T, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	fw, err := flate.NewWriter(&b, flate.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	for range n >> 20 {
		if _, err := fw.Write(zeros); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bomb returns a zip bundle whose entry name inflates to size zero bytes but whose
// header claims claimed.
func bomb(t *testing.T, name string, size int, claimed uint64) []byte {
	t.Helper()
	payload := deflated(t, size)
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	fw, err := w.CreateRaw(&zip.FileHeader{Name: name, Method: zip.Deflate,
		CompressedSize64: uint64(len(payload)), UncompressedSize64: claimed})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fw.Write(payload); err != nil {
		t.Fatal(err)
	}
	cw, _ := w.Create("compose.star")
	_, _ = cw.Write([]byte("def compose(spec, config):\n    return {}\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestZipBombFailsWithinTheCap: a 64 MiB entry deflated into a few tens of KB fails
// terminally, whether its header tells its size or lies, and compiling it allocates
// nowhere near what it would inflate to. An entry that is not a .star file is never
// inflated.
func TestZipBombFailsWithinTheCap(t *testing.T) {
	const size = 64 << 20
	for _, tc := range []struct {
		name    string
		bundle  []byte
		wantErr string
	}{
		{"honest header", bomb(t, "lib.star", size, size), "lib.star: unpacks to more than 524288 bytes, the per-file cap"},
		{"lying header", bomb(t, "lib.star", size, 100), "config.data: lib.star: "},
		{"header at the cap", bomb(t, "lib.star", size, MaxFile), "config.data: lib.star: "},
		{"not a .star file", bomb(t, "data.bin", size, size), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := composeBundle(t, tc.bundle)
			runtime.ReadMemStats(&after)
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("err = %v; want the bomb skipped", err)
				}
			} else {
				wantTerminal(t, err, tc.wantErr)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
				t.Errorf("compiling the bomb allocated %d bytes; want it stopped near the %d-byte cap", alloc, MaxFile)
			}
		})
	}
}

func TestBundleCaps(t *testing.T) {
	body := "def compose(spec, config):\n    return {}\n"
	padded := func(n int) string { return body + "#" + strings.Repeat("x", n-len(body)-2) + "\n" }
	var many []file
	for i := range MaxUnpacked/(MaxFile-1) + 1 { // each under the per-file cap, over the total
		many = append(many, file{fmt.Sprintf("lib%d.star", i), padded(MaxFile - 1)})
	}
	for _, tc := range []struct {
		name   string
		bundle []byte
		want   string // "" for success
	}{
		{"file at the cap", zipOf(t, file{"compose.star", padded(MaxFile)}), ""},
		{"file over the cap", zipOf(t, file{"compose.star", padded(MaxFile + 1)}), "compose.star: unpacks to more than 524288 bytes, the per-file cap"},
		{"single file at the cap", []byte(padded(MaxFile)), ""},
		{"single file over the cap", []byte(padded(MaxFile + 1)), "config.data: compose.star is 524289 bytes, over the 524288-byte per-file cap"},
		{"total over the cap", zipOf(t, append(many, file{"compose.star", body})...), "the bundle unpacks to more than 4194304 bytes"},
		{"data over the cap", append(zipOf(t, file{"compose.star", body}), make([]byte, MaxBundle)...), "config.data: the bundle is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := composeBundle(t, tc.bundle)
			if tc.want == "" {
				if err != nil {
					t.Errorf("err = %v; want it to compile", err)
				}
				return
			}
			wantTerminal(t, err, tc.want)
		})
	}
}

// TestZipBundleIsCached: the compiled-program cache holds a zip bundle by its hash too.
func TestZipBundleIsCached(t *testing.T) {
	p := New("stdstarlark").(*provider)
	bundle := zipOf(t, file{"lib/net.star", netLib}, file{"names.star", namesLib}, file{"compose.star", bundleCompose})
	p.OnConfig(webhooksdk.ProviderConfig{Data: bundle})
	if len(p.cache) != 1 {
		t.Fatalf("cache holds %d programs after OnConfig; want 1", len(p.cache))
	}
	first, err := p.program(t.Context(), bundle)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := p.program(t.Context(), bytes.Clone(bundle)); again != first {
		t.Error("the same bundle compiled twice")
	}
}
