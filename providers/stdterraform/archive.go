package stdterraform

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// unpack extracts the module in archive f (a .tar.gz or a .zip, told apart by its first
// bytes) into dst: only the entries under subdir when one is given, with subdir's path
// stripped. Every entry must be a directory or a regular file with a relative name
// inside the archive: no "..", no absolute name, no link (symbolic or hard, wherever it
// points), no device. Every entry's size counts against lim, those outside subdir too.
// Refusals wrap errContent.
func unpack(f *os.File, dst, subdir string, lim sourceLimits) error {
	var magic [4]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read archive: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("read archive: %w", err)
	}
	u := &unpacker{dst: dst, subdir: subdir, lim: lim}
	switch {
	case bytes.HasPrefix(magic[:], []byte{0x1f, 0x8b}):
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		err = u.tarGz(f)
	case bytes.Equal(magic[:], []byte("PK\x03\x04")):
		err = u.zip(f, fi.Size())
	default:
		return fmt.Errorf("%w: not a .tar.gz or a .zip archive (it starts %q)", errContent, magic[:])
	}
	if err != nil {
		return err
	}
	if u.found == 0 {
		if subdir != "" {
			return fmt.Errorf("%w: the archive has no directory //%s", errContent, subdir)
		}
		return fmt.Errorf("%w: the archive is empty", errContent)
	}
	return nil
}

type unpacker struct {
	dst, subdir string
	lim         sourceLimits
	files       int   // entries seen
	bytes       int64 // bytes unpacked, and declared by the entries skipped
	found       int   // entries written
}

func (u *unpacker) tarGz(r io.Reader) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%w: gzip: %w", errContent, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		// Under GODEBUG=tarinsecurepath=0 an entry with ".." or an absolute name comes
		// with ErrInsecurePath; entryPath names it.
		if err != nil && (h == nil || !errors.Is(err, tar.ErrInsecurePath)) {
			return fmt.Errorf("%w: tar: %w", errContent, err)
		}
		var mode fs.FileMode
		switch h.Typeflag {
		case tar.TypeDir:
			mode = fs.ModeDir
		case tar.TypeReg:
			mode = fs.FileMode(h.Mode).Perm()
		case tar.TypeXGlobalHeader:
			continue
		case tar.TypeSymlink, tar.TypeLink:
			return fmt.Errorf("%w: %s is a link (to %s): a module is plain files", errContent, h.Name, h.Linkname)
		default:
			return fmt.Errorf("%w: %s is not a file or directory (tar type %q)", errContent, h.Name, h.Typeflag)
		}
		if err := u.entry(h.Name, mode, h.Size, tr); err != nil {
			return err
		}
	}
}

func (u *unpacker) zip(r io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(r, size)
	// Under GODEBUG=zipinsecurepath=0 an entry with ".." or an absolute name fails here;
	// entryPath names it.
	if err != nil && (zr == nil || !errors.Is(err, zip.ErrInsecurePath)) {
		return fmt.Errorf("%w: zip: %w", errContent, err)
	}
	for _, zf := range zr.File {
		m := zf.Mode()
		if !m.IsDir() && !m.IsRegular() {
			return fmt.Errorf("%w: %s is not a file or directory (mode %s): a module is plain files", errContent, zf.Name, m)
		}
		err := func() error {
			if m.IsDir() {
				return u.entry(zf.Name, fs.ModeDir, 0, nil)
			}
			rc, err := zf.Open()
			if err != nil {
				return fmt.Errorf("%w: zip: %s: %w", errContent, zf.Name, err)
			}
			defer rc.Close()
			return u.entry(zf.Name, m.Perm(), int64(zf.UncompressedSize64), rc)
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// entry checks one entry and writes it under dst when it is in the module.
func (u *unpacker) entry(name string, mode fs.FileMode, size int64, r io.Reader) error {
	rel, err := entryPath(name)
	if err != nil {
		return err
	}
	u.files++
	if u.files > u.lim.Files {
		return fmt.Errorf("%w: the archive has over %d entries (config.source_limits.files)", errContent, u.lim.Files)
	}
	if size < 0 || size > u.lim.ModuleBytes-u.bytes {
		return fmt.Errorf("%w: the module is over %d bytes unpacked (config.source_limits.module_bytes)", errContent, u.lim.ModuleBytes)
	}
	if u.subdir != "" {
		inner, ok := strings.CutPrefix(rel+"/", u.subdir+"/")
		if !ok {
			u.bytes += size
			return nil
		}
		rel = strings.TrimSuffix(inner, "/")
	}
	if rel == "" || rel == "." {
		u.found++
		return nil
	}
	for _, el := range strings.Split(rel, "/") {
		if leftOut(el, true) {
			return nil
		}
	}
	dir := mode.IsDir()
	if leftOut(path.Base(rel), dir) {
		return nil
	}
	u.found++
	target := filepath.Join(u.dst, filepath.FromSlash(rel))
	if dir {
		return os.MkdirAll(target, 0o700)
	}
	// No entry is ever written as a link, so no parent here can lead out of dst.
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode(mode))
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %s appears twice in the archive", errContent, name)
	}
	if err != nil {
		return err
	}
	in := &archiveReader{r: r}
	n, err := io.Copy(out, io.LimitReader(in, size+1))
	u.bytes += n
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	switch {
	case in.err != nil:
		return fmt.Errorf("%w: %s: %w", errContent, name, in.err)
	case err != nil:
		return err // the disk's: transient
	case n != size:
		return fmt.Errorf("%w: %s holds more or less than the %d bytes its header says", errContent, name, size)
	}
	return nil
}

// entryPath is an archive entry's name as a clean relative slash path; a name that is
// absolute, climbs out with "..", or is otherwise odd is refused.
func entryPath(name string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w: entry %q %s", errContent, name, why)
	}
	switch {
	case name == "":
		return bad("has no name")
	case strings.ContainsAny(name, "\\\x00"):
		return bad("has a backslash or a NUL in its name")
	case path.IsAbs(name) || filepath.IsAbs(name) || filepath.VolumeName(name) != "":
		return bad("is an absolute path")
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return bad(`climbs out with ".."`)
		}
	}
	return path.Clean(name), nil
}

// archiveReader keeps the error reading the archive, to tell it (a corrupt archive,
// terminal) from one writing the disk (transient).
type archiveReader struct {
	r   io.Reader
	err error
}

func (a *archiveReader) Read(b []byte) (int, error) {
	n, err := a.r.Read(b)
	if err != nil && !errors.Is(err, io.EOF) {
		a.err = err
	}
	return n, err
}
