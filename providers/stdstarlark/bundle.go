package stdstarlark

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"go.starlark.net/starlark"

	"github.com/convergeplane/converge/webhooksdk"
)

// The bundle's caps. A real composition program is a few KB; the caps bound what a
// hostile or broken bundle can make the provider hold in memory.
const (
	// MaxBundle caps the provider config's data as it arrives (a zip, compressed).
	MaxBundle = 4 << 20
	// MaxFile caps one .star file, unpacked: a zip entry or the single-file program.
	MaxFile = 512 << 10
	// MaxUnpacked caps the .star files of a zip bundle, unpacked, in total.
	MaxUnpacked = 4 << 20
)

// rootModule is the module the program starts from: the single file, or the file of
// that name at a zip bundle's root. Starlark positions carry it: "compose.star:3:5: …".
const rootModule = "compose.star"

// zipPrefixes tell a zip bundle from a single file: a zip starts with a local file
// header, or, when empty, with its end-of-central-directory record. Neither can start a
// Starlark program ("PK" then a control character).
var zipPrefixes = [][]byte{[]byte("PK\x03\x04"), []byte("PK\x05\x06")}

// bundleFiles returns the program's .star files by path: the data itself as
// compose.star, or the .star files of a zip bundle. Empty data is transient (the
// provider config may not have propagated yet); anything else wrong is terminal.
func bundleFiles(data []byte) (map[string][]byte, error) {
	switch {
	case len(data) == 0:
		return nil, errors.New("config.data is empty: the provider config has no Starlark program (yet)")
	case len(data) > MaxBundle:
		return nil, webhooksdk.Terminal(fmt.Errorf("config.data: the bundle is %d bytes, over the %d-byte cap", len(data), MaxBundle))
	case !slices.ContainsFunc(zipPrefixes, func(p []byte) bool { return bytes.HasPrefix(data, p) }):
		if len(data) > MaxFile {
			return nil, webhooksdk.Terminal(fmt.Errorf("config.data: %s is %d bytes, over the %d-byte per-file cap", rootModule, len(data), MaxFile))
		}
		return map[string][]byte{rootModule: data}, nil
	}
	files, err := unzip(data)
	if err != nil {
		return nil, webhooksdk.Terminal(fmt.Errorf("config.data: %w", err))
	}
	if _, ok := files[rootModule]; !ok {
		return nil, webhooksdk.Terminal(fmt.Errorf("config.data: the zip bundle has no %s at its root", rootModule))
	}
	return files, nil
}

// unzip reads a zip bundle's .star files into memory. Other files are skipped without
// being inflated; directories are skipped. Every entry's path must be a clean relative
// one. Each .star file is inflated through a reader limited to what the caps leave, so
// an entry whose header lies about its size (a zip bomb) stops at the cap.
func unzip(data []byte) (map[string][]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	// Under GODEBUG=zipinsecurepath=0 an entry with ".." fails here; the checks below
	// name it.
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, fmt.Errorf("not a readable zip bundle: %w", err)
	}
	files := make(map[string][]byte)
	total := 0
	for _, f := range zr.File {
		name := strings.TrimSuffix(f.Name, "/")
		if err := checkPath(name); err != nil {
			return nil, fmt.Errorf("entry %q: %w", f.Name, err)
		}
		if strings.HasSuffix(f.Name, "/") || f.Mode().IsDir() || !strings.HasSuffix(name, ".star") {
			continue
		}
		if !f.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file (%s)", name, f.Mode().Type())
		}
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("%s: in the zip twice", name)
		}
		limit := min(MaxFile, MaxUnpacked-total)
		b, over, err := inflate(f, limit)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s: %w", name, err)
		case over:
			if limit < MaxFile {
				return nil, fmt.Errorf("%s: the bundle unpacks to more than %d bytes, the cap on its .star files in total", name, MaxUnpacked)
			}
			return nil, fmt.Errorf("%s: unpacks to more than %d bytes, the per-file cap", name, MaxFile)
		}
		files[name] = b
		total += len(b)
	}
	return files, nil
}

// inflate reads f, or reports it over limit: by its header, without inflating it, or,
// whatever its header says, by reading one byte past limit and no further.
func inflate(f *zip.File, limit int) (b []byte, over bool, err error) {
	if f.UncompressedSize64 > uint64(limit) {
		return nil, true, nil
	}
	rc, err := f.Open()
	if err != nil {
		return nil, false, err
	}
	defer rc.Close()
	b, err = io.ReadAll(io.LimitReader(rc, int64(limit)+1))
	if err != nil {
		return nil, false, err
	}
	return b, len(b) > limit, nil
}

// checkPath accepts a clean relative slash path: no "..", "." or empty segment, not
// absolute, no backslash or drive letter.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("an empty path")
	case path.IsAbs(p) || strings.ContainsAny(p, `\:`):
		return errors.New("an absolute path (a bundle path is relative to its root, with slashes)")
	}
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "..":
			return errors.New(`a path with ".." (a bundle path stays inside the bundle)`)
		case "", ".":
			return errors.New("not a clean path (an empty or \".\" segment)")
		}
	}
	return nil
}

// loader runs a bundle's modules for one compile: each at most once, on the compiling
// thread (so the step limit covers the whole top level), named by its path from the
// bundle root whichever file loads it.
type loader struct {
	files   map[string][]byte
	modules map[string]starlark.StringDict // the modules run so far, frozen
	running []string                       // the modules being run, outermost first
}

func newLoader(files map[string][]byte) *loader {
	return &loader{files: files, modules: make(map[string]starlark.StringDict)}
}

// load is the thread's Load: load("lib/net.star", "sym") in any file of the bundle.
func (l *loader) load(th *starlark.Thread, module string) (starlark.StringDict, error) {
	if err := checkPath(module); err != nil {
		return nil, err
	}
	if !strings.HasSuffix(module, ".star") {
		return nil, errors.New("not a .star file")
	}
	return l.run(th, module)
}

// run runs module, or returns its globals if it already ran.
func (l *loader) run(th *starlark.Thread, module string) (starlark.StringDict, error) {
	if g, ok := l.modules[module]; ok {
		return g, nil
	}
	if i := slices.Index(l.running, module); i >= 0 {
		return nil, fmt.Errorf("a load cycle: %s", strings.Join(append(slices.Clone(l.running[i:]), module), " loads "))
	}
	src, ok := l.files[module]
	if !ok {
		return nil, fmt.Errorf("no %s in the bundle (a load path is relative to the bundle's root)", module)
	}
	l.running = append(l.running, module)
	defer func() { l.running = l.running[:len(l.running)-1] }()
	// ExecFileOptions freezes the globals: they are safe to share between concurrent
	// calls, and no call can leave state behind for the next.
	g, err := starlark.ExecFileOptions(fileOptions, th, module, src, predeclared)
	if err != nil {
		// The loading file's error names the load statement, not the failure: say where
		// in this module it was.
		return nil, locate(err)
	}
	l.modules[module] = g
	return g, nil
}
