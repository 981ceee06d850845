package stdterraform

import (
	"bytes"
	"cmp"
	"context"
	"crypto/md5" //nolint:gosec // S3's ETag is an MD5; it is checked, not trusted for security
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/convergeplane/converge/webhooksdk"
)

// A module source is spec.source: an absolute local path, or a URL the provider fetches
// into the run directory. The forms (go-getter's, as Terraform writes them):
//
//	/abs/path                              a local directory, copied
//	https://host/path/mod.tar.gz           an archive over HTTPS
//	s3://bucket/key.tar.gz[?region=R]      an archive in S3 (the ambient AWS chain)
//	gs://bucket/object.tar.gz              an archive in GCS (Google's ambient credentials)
//	azblob://account/container/blob.tar.gz an archive in Azure Blob (the ambient identity)
//	git::https://host/repo[?ref=REF]       a git repository at REF (default: its HEAD)
//	git::file:///path/repo[?ref=REF]       the same from a local repository
//
// Each URL form takes a //subdir (the module is that directory of the archive or
// repository) and the archive forms an optional ?checksum=sha256:<hex> the archive must
// match. An archive is a .tar.gz or a .zip, told apart by its first bytes.
const (
	kindLocal = "local"
	kindHTTPS = "https"
	kindS3    = "s3"
	kindGit   = "git"
	kindGS    = "gs"
	kindAzure = "azblob"
)

// moduleSource is a parsed spec.source.
type moduleSource struct {
	kind   string
	path   string   // kindLocal: the directory
	url    *url.URL // the URL to fetch: no subdir, no checksum, no git:: prefix
	subdir string   // the module's directory inside what is fetched ("" for its root)
	sha256 []byte   // ?checksum=sha256:… (archives only)
	ref    string   // kindGit: ?ref=
}

// parseSource parses spec.source; its errors are the user's and terminal.
func parseSource(raw string) (moduleSource, error) {
	if strings.HasPrefix(raw, "/") {
		return moduleSource{kind: kindLocal, path: filepath.Clean(raw)}, nil
	}
	kind := ""
	rest := raw
	if r, ok := strings.CutPrefix(raw, "git::"); ok {
		kind, rest = kindGit, r
	}
	u, err := url.Parse(rest)
	switch {
	case err != nil:
		return moduleSource{}, fmt.Errorf("%q is neither an absolute path nor a URL: %w", raw, err)
	case u.User != nil:
		return moduleSource{}, fmt.Errorf("%q carries credentials: the provider uses its ambient identity", raw)
	case u.Fragment != "":
		return moduleSource{}, fmt.Errorf("%q has a fragment", raw)
	}
	switch {
	case kind == kindGit && (u.Scheme == "https" || u.Scheme == "file"):
	case kind == kindGit:
		return moduleSource{}, fmt.Errorf("%q: git sources are git::https:// or git::file://", raw)
	case u.Scheme == "https":
		kind = kindHTTPS
	case u.Scheme == "s3":
		kind = kindS3
	case u.Scheme == "gs":
		kind = kindGS
	case u.Scheme == "azblob":
		kind = kindAzure
	case u.Scheme == "http":
		return moduleSource{}, fmt.Errorf("%q: plain http is refused, use https", raw)
	default:
		return moduleSource{}, fmt.Errorf("%q: want an absolute path or a https://, s3://, gs://, azblob:// or git:: URL", raw)
	}
	src := moduleSource{kind: kind}
	// //subdir: the path's first "//" (go-getter's rule).
	if p, sub, ok := strings.Cut(u.Path, "//"); ok && p != "" {
		clean := path.Clean(sub)
		if sub == "" || path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return moduleSource{}, fmt.Errorf("%q: //%s is not a directory inside the module", raw, sub)
		}
		u.Path, u.RawPath, src.subdir = p, "", clean
		if clean == "." {
			src.subdir = ""
		}
	}
	q := u.Query()
	if c := q.Get("checksum"); c != "" {
		if kind == kindGit {
			return moduleSource{}, fmt.Errorf("%q: a git source takes ?ref=, not ?checksum= (pin a commit instead)", raw)
		}
		hexSum, ok := strings.CutPrefix(c, "sha256:")
		sum, err := hex.DecodeString(hexSum)
		if !ok || err != nil || len(sum) != sha256.Size {
			return moduleSource{}, fmt.Errorf("%q: checksum %q is not sha256:<64 hex digits>", raw, c)
		}
		src.sha256 = sum
		q.Del("checksum")
	}
	if kind == kindGit {
		src.ref = q.Get("ref")
		if strings.HasPrefix(src.ref, "-") {
			return moduleSource{}, fmt.Errorf("%q: ref %q starts with -", raw, src.ref)
		}
		q.Del("ref")
		if len(q) > 0 {
			return moduleSource{}, fmt.Errorf("%q: a git source takes only ?ref=", raw)
		}
	}
	if src.sha256 != nil || kind == kindGit {
		u.RawQuery = q.Encode() // only when a parameter of ours came out: a presigned URL stays as written
	}
	if u.Host == "" && u.Scheme != "file" {
		return moduleSource{}, fmt.Errorf("%q names no host or bucket", raw)
	}
	src.url = u
	return src, nil
}

// sourceLimits caps what a fetched module may take. The zero value is the defaults.
type sourceLimits struct {
	// ArchiveBytes caps the archive as downloaded (default 64 MiB).
	ArchiveBytes int64 `json:"archive_bytes"`
	// ModuleBytes caps the bytes unpacked (default 256 MiB).
	ModuleBytes int64 `json:"module_bytes"`
	// Files caps the entries unpacked, directories included (default 10000).
	Files int `json:"files"`
}

// The default source limits.
const (
	archiveBytesDefault = 64 << 20
	moduleBytesDefault  = 256 << 20
	filesDefault        = 10000
)

// parseSourceLimits reads config.source_limits, filling the defaults.
func parseSourceLimits(raw json.RawMessage) (sourceLimits, error) {
	var cfg struct {
		SourceLimits sourceLimits `json:"source_limits"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return sourceLimits{}, fmt.Errorf("config: %w", err)
		}
	}
	l := cfg.SourceLimits
	if l.ArchiveBytes < 0 || l.ModuleBytes < 0 || l.Files < 0 {
		return sourceLimits{}, fmt.Errorf("config.source_limits: %+v has a negative cap", l)
	}
	l.ArchiveBytes = cmp.Or(l.ArchiveBytes, archiveBytesDefault)
	l.ModuleBytes = cmp.Or(l.ModuleBytes, moduleBytesDefault)
	l.Files = cmp.Or(l.Files, filesDefault)
	return l, nil
}

// errContent marks a fetched module that is wrong in itself (a malformed archive, a
// failed checksum, a path or a link leaving it, a cap exceeded): fetching it again
// cannot help, so it is terminal. Other fetch failures (a missing object, an unreachable
// host, a refused credential) are transient.
var errContent = errors.New("module refused")

// object is an archive being downloaded, with the digests its store vouches for.
type object struct {
	body   io.ReadCloser
	md5    []byte // nil when the store offers none
	sha    []byte
	crc32c []byte // big-endian, Castagnoli
}

// fetchModule puts the module spec.source names into run: the directory terraform runs
// in. Errors name spec.source; errContent ones are terminal.
func (p *provider) fetchModule(ctx context.Context, raw, run string, lim sourceLimits) error {
	src, err := parseSource(raw)
	if err != nil {
		return webhooksdk.Terminal(fmt.Errorf("spec.source: %w", err))
	}
	switch src.kind {
	case kindLocal:
		err = copyModule(src.path, run)
	case kindGit:
		err = p.fetchGit(ctx, src, run, lim)
	default:
		err = p.fetchArchive(ctx, src, run, lim)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errContent), errors.Is(err, fs.ErrNotExist) && src.kind == kindLocal:
		return webhooksdk.Terminal(fmt.Errorf("spec.source: %w", err))
	}
	return fmt.Errorf("spec.source: %w", err)
}

// fetchArchive downloads an archive next to run, checks its size and digests, and
// unpacks its module into run.
func (p *provider) fetchArchive(ctx context.Context, src moduleSource, run string, lim sourceLimits) error {
	var obj object
	var err error
	switch src.kind {
	case kindHTTPS:
		obj, err = p.openHTTPS(ctx, src.url)
	case kindS3:
		obj, err = openS3(ctx, src.url)
	case kindGS:
		obj, err = openGCS(ctx, src.url)
	case kindAzure:
		obj, err = openAzureBlob(ctx, src.url)
	default:
		err = fmt.Errorf("no fetcher for %s sources", src.kind)
	}
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(run), "fetch-")
	if err != nil {
		obj.body.Close()
		return fmt.Errorf("download: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := download(f, obj, src.sha256, lim.ArchiveBytes); err != nil {
		return err
	}
	return unpack(f, run, src.subdir, lim)
}

// download copies obj into f, at most max bytes, and checks the digests.
func download(f *os.File, obj object, want []byte, maxBytes int64) error {
	defer obj.body.Close()
	sha, sum, crc := sha256.New(), md5.New(), crc32.New(crc32.MakeTable(crc32.Castagnoli)) //nolint:gosec // see the import
	n, err := io.Copy(io.MultiWriter(f, sha, sum, crc), io.LimitReader(obj.body, maxBytes+1))
	switch {
	case err != nil:
		return fmt.Errorf("download: %w", err)
	case n > maxBytes:
		return fmt.Errorf("%w: the archive is over %d bytes (config.source_limits.archive_bytes)", errContent, maxBytes)
	}
	for _, c := range []struct {
		name      string
		want, got []byte
		h         hash.Hash
	}{
		{"sha256 (?checksum=)", want, nil, sha},
		{"sha256 (the store's)", obj.sha, nil, sha},
		{"md5 (the store's)", obj.md5, nil, sum},
		{"crc32c (the store's)", obj.crc32c, nil, crc},
	} {
		if c.want == nil {
			continue
		}
		if got := c.h.Sum(nil); !bytes.Equal(got, c.want) {
			return fmt.Errorf("%w: the archive's %s is %x, want %x", errContent, c.name, got, c.want)
		}
	}
	return nil
}

// leftOut says whether a module entry stays out of the run directory: a local
// .terraform directory and state files, which belong to whoever ran terraform there.
func leftOut(name string, dir bool) bool {
	if dir {
		return name == ".terraform"
	}
	return strings.HasPrefix(name, stateFile)
}

// copyModule copies the local module's files and directories into dst, leaving out what
// leftOut names; a link or any other non-regular file is refused.
func copyModule(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", errContent, src)
	}
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		switch {
		case rel == ".":
			return nil
		case leftOut(d.Name(), d.IsDir()) && d.IsDir():
			return filepath.SkipDir
		case leftOut(d.Name(), d.IsDir()):
			return nil
		case d.IsDir():
			return os.Mkdir(filepath.Join(dst, rel), 0o700)
		case !d.Type().IsRegular():
			return fmt.Errorf("%w: %s is not a regular file", errContent, path)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, fileMode(info.Mode()))
	})
	if err != nil {
		return fmt.Errorf("copy module: %w", err)
	}
	return nil
}

// fileMode is a module file's mode in the run directory: private, executable if the
// original is (a script a provisioner runs).
func fileMode(m fs.FileMode) fs.FileMode {
	if m&0o111 != 0 {
		return 0o700
	}
	return 0o600
}
