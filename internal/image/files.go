package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// file is one entry of a layer: a regular file, or a directory when mode
// has fs.ModeDir.
type file struct {
	path     string
	mode     fs.FileMode
	uid, gid int
	data     []byte
}

// baseFiles are the files every platform's image shares: the users, the CA
// certificates (and the RDS ones when given), a home for the nonroot user and
// a /tmp. No shell and no other program: the binary is the only executable.
func baseFiles(cfg imageConfig) []file {
	home := "/home/" + nonrootName
	files := []file{
		{path: "/etc", mode: fs.ModeDir | 0o755},
		{path: "/etc/group", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", nonrootName, nonrootID)},
		{path: "/etc/passwd", mode: 0o644, data: fmt.Appendf(nil,
			"root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", nonrootName, nonrootID, nonrootID, nonrootName, home)},
		{path: "/etc/ssl", mode: fs.ModeDir | 0o755},
		{path: "/etc/ssl/certs", mode: fs.ModeDir | 0o755},
		{path: caPath, mode: 0o644, data: cfg.CACerts},
	}
	if cfg.RDSCA != nil {
		files = append(files, file{path: rdsCAPath, mode: 0o644, data: cfg.RDSCA})
	}
	return append(files,
		file{path: "/home", mode: fs.ModeDir | 0o755},
		file{path: home, mode: fs.ModeDir | 0o700, uid: nonrootID, gid: nonrootID},
		file{path: "/tmp", mode: fs.ModeDir | fs.ModeSticky | 0o777},
	)
}

// writeTar writes files as a tar stream in the order given, every entry
// stamped with mtime and no host detail (owner names, access times), so the
// stream depends on the files alone.
func writeTar(w io.Writer, files []file, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		h := &tar.Header{
			Name:    strings.TrimPrefix(f.path, "/"),
			Mode:    int64(f.mode.Perm()),
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: mtime.UTC().Truncate(time.Second),
			Format:  tar.FormatPAX,
		}
		if f.mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if f.mode.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
	}
	return tw.Close()
}

// mozillaRoots returns, as PEM, the roots of golang.org/x/crypto's
// x509roots/fallback bundle (Mozilla's NSS trust store), pinned by go.mod:
// the image's certificates depend on the commit, not on the machine that
// built it. A root NSS distrusts after some date carries a constraint a PEM
// file cannot express, so it is left out rather than trusted without it.
func mozillaRoots() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}) // a bytes.Buffer does not fail
	}
	return b.Bytes()
}
