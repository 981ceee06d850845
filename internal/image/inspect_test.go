package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"debug/elf"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// tzdataMarker is a zone name only Go's embedded time zone database
// (-tags timetzdata) puts into a converge binary.
const tzdataMarker = "America/New_York"

// shells are program names that must not be anywhere in the image.
var shells = []string{"sh", "bash", "ash", "dash", "zsh", "busybox"}

// inspect returns what is wrong with one platform's image, one line per
// problem: its config, then its files as a container runtime unpacks them.
func inspect(img v1.Image, p v1.Platform) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	cf, err := img.ConfigFile()
	if err != nil {
		return []string{"config: " + err.Error()}
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		bad("config platform %s/%s, want %s", cf.OS, cf.Architecture, p)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/converge"}) {
		bad("Entrypoint %q, want [/converge]", c.Entrypoint)
	}
	if c.User != "65532:65532" {
		bad("User %q, want 65532:65532", c.User)
	}
	for _, port := range []string{"8080/tcp", "8081/tcp"} {
		if _, ok := c.ExposedPorts[port]; !ok {
			bad("ExposedPorts %v lacks %s", c.ExposedPorts, port)
		}
	}
	for _, l := range []string{labelVersion, labelSource} {
		if c.Labels[l] == "" {
			bad("label %s is missing", l)
		}
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(c.Labels[labelRevision]) {
		bad("label %s = %q, want a commit hash", labelRevision, c.Labels[labelRevision])
	}
	if created, err := time.Parse(time.RFC3339, c.Labels[labelCreated]); err != nil || !created.Equal(cf.Created.Time) {
		bad("label %s = %q, want the config's created time %s", labelCreated, c.Labels[labelCreated], cf.Created.Time)
	}

	files, err := unpack(img)
	if err != nil {
		return append(problems, "layers: "+err.Error())
	}
	for name, f := range files {
		if slices.Contains(shells, path.Base(name)) {
			bad("%s is in the image: no shell wanted", name)
		}
		if f.Typeflag == tar.TypeReg && f.Mode&0o111 != 0 && name != "converge" {
			bad("%s is executable: /converge should be the only program", name)
		}
	}
	if bin, ok := files["converge"]; !ok || bin.Typeflag != tar.TypeReg || bin.Mode&0o755 != 0o755 {
		bad("/converge is missing or not an executable file")
	} else {
		if err := checkStatic(bin.data, p); err != nil {
			bad("/converge: %v", err)
		}
		if !bytes.Contains(bin.data, []byte(tzdataMarker)) {
			bad("/converge has no time zone data (built without -tags timetzdata?)")
		}
	}
	if !strings.Contains(string(files["etc/passwd"].data), "\nnonroot:x:65532:65532:") {
		bad("/etc/passwd has no nonroot user 65532:\n%s", files["etc/passwd"].data)
	}
	if !strings.Contains(string(files["etc/group"].data), "\nnonroot:x:65532:") {
		bad("/etc/group has no nonroot group 65532")
	}
	if n, err := countCerts(files["etc/ssl/certs/ca-certificates.crt"].data); err != nil || n < 100 {
		bad("/etc/ssl/certs/ca-certificates.crt: %d certificates (%v), want Mozilla's roots", n, err)
	}
	rds, ok := files["etc/ssl/certs/rds-global-bundle.pem"]
	switch want := c.Labels[labelRDSCA]; {
	case want == "none" && ok:
		bad("label %s says none, but the image has the RDS CA bundle", labelRDSCA)
	case want != "none" && !ok:
		bad("label %s = %q, but the image has no RDS CA bundle", labelRDSCA, want)
	case ok:
		if sum := sha256.Sum256(rds.data); want != "sha256:"+hex.EncodeToString(sum[:]) {
			bad("label %s = %q does not match the RDS CA bundle's sha256", labelRDSCA, want)
		}
	}
	if tmp := files["tmp"]; tmp.Typeflag != tar.TypeDir || tmp.Mode&0o1777 != 0o1777 {
		bad("/tmp is not a world-writable sticky directory")
	}
	if home := files["home/nonroot"]; home.Typeflag != tar.TypeDir || home.Uid != 65532 {
		bad("/home/nonroot is not a directory the nonroot user owns")
	}
	return problems
}

// unpacked is one entry of an image's flattened file system.
type unpacked struct {
	tar.Header
	data []byte
}

// unpack flattens img's layers as a runtime would and returns its entries by
// path (no leading slash).
func unpack(img v1.Image) (map[string]unpacked, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]unpacked{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[strings.TrimSuffix(path.Clean(h.Name), "/")] = unpacked{Header: *h, data: data}
	}
}

// countCerts counts the certificates of a PEM bundle, failing on anything else.
func countCerts(b []byte) (int, error) {
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return n, nil
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return n, err
		}
		n++
	}
}

// fakeELF returns the smallest ELF executable debug/elf reads for arch: a
// header and one PT_LOAD, plus a PT_INTERP when dynamic; tail follows it.
// It stands in for converge where a test needs a binary but not to run it.
func fakeELF(arch string, dynamic bool, tail string) []byte {
	progs := []elf.ProgType{elf.PT_LOAD}
	if dynamic {
		progs = append(progs, elf.PT_INTERP)
	}
	const ehsize, phsize = 64, 56
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machines[arch]), Version: uint32(elf.EV_CURRENT),
		Phoff: ehsize, Ehsize: ehsize, Phentsize: phsize, Phnum: uint16(len(progs)),
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, h)
	for _, t := range progs {
		_ = binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(t), Flags: uint32(elf.PF_R)})
	}
	b.WriteString(tail)
	return b.Bytes()
}
