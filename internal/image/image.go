package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the image runs as: distroless's nonroot, so volumes and policies
// written for distroless images fit this one.
const (
	nonrootID   = 65532
	nonrootName = "nonroot"
)

// The image's well-known paths.
const (
	binaryPath = "/converge"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	// rdsCAPath is where infra/'s DATABASE_URL points sslrootcert.
	rdsCAPath = "/etc/ssl/certs/rds-global-bundle.pem"
)

// The OCI annotation and label keys the image carries.
const (
	labelVersion  = "org.opencontainers.image.version"
	labelSource   = "org.opencontainers.image.source"
	labelRevision = "org.opencontainers.image.revision"
	labelCreated  = "org.opencontainers.image.created"
	labelTitle    = "org.opencontainers.image.title"
	// labelRDSCA names the RDS CA bundle's sha256, or "none" for an image
	// built without it: push refuses the latter unless told otherwise.
	labelRDSCA = "io.convergeplane.image.rds-ca-bundle"
)

// imageConfig is what goes into the image besides the per-platform binary.
type imageConfig struct {
	// Version, Source and Revision become the org.opencontainers.image labels.
	Version, Source, Revision string
	// Created stamps the config, the labels and every file's mtime, so two
	// builds of one commit are the same bytes.
	Created time.Time
	// CACerts is the PEM bundle written to caPath.
	CACerts []byte
	// RDSCA is the RDS CA bundle written to rdsCAPath; nil leaves it out.
	RDSCA []byte
}

// platformBinary is one platform's static converge executable.
type platformBinary struct {
	Platform v1.Platform
	Binary   []byte
}

// labels returns the config labels, which the index carries as annotations too.
func (c imageConfig) labels() map[string]string {
	rds := "none"
	if c.RDSCA != nil {
		sum := sha256.Sum256(c.RDSCA)
		rds = "sha256:" + hex.EncodeToString(sum[:])
	}
	return map[string]string{
		labelTitle:    "converge",
		labelVersion:  c.Version,
		labelSource:   c.Source,
		labelRevision: c.Revision,
		labelCreated:  c.Created.UTC().Format(time.RFC3339),
		labelRDSCA:    rds,
	}
}

// assemble builds the image index: one image per binary on an empty base,
// each with a layer of the files every platform shares (shared blob) and a
// layer holding the binary alone.
func assemble(cfg imageConfig, bins []platformBinary) (v1.ImageIndex, error) {
	base, err := layerOf(baseFiles(cfg), cfg.Created)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, b := range bins {
		img, err := platformImage(cfg, base, b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.Platform, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &b.Platform}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	return mutate.Annotations(idx, cfg.labels()).(v1.ImageIndex), nil
}

// platformImage is one platform's image: the base layer, the binary's layer
// and the config that runs it as the nonroot user.
func platformImage(cfg imageConfig, base v1.Layer, b platformBinary) (v1.Image, error) {
	bin, err := layerOf([]file{{path: binaryPath, mode: 0o755, data: b.Binary}}, cfg.Created)
	if err != nil {
		return nil, fmt.Errorf("binary layer: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: cfg.Created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "converge image: users, CA certificates, /tmp"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: created, CreatedBy: "converge image: " + binaryPath}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = b.Platform.OS, b.Platform.Architecture, b.Platform.Variant
	cf.Created = created
	user := strconv.Itoa(nonrootID)
	cf.Config = v1.Config{
		Entrypoint:   []string{binaryPath},
		User:         user + ":" + user,
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "8081/tcp": {}},
		Labels:       cfg.labels(),
	}
	return mutate.ConfigFile(img, cf)
}

// layerOf makes a gzipped OCI layer of files, deterministic: the same files
// and time give the same digest.
func layerOf(files []file, mtime time.Time) (v1.Layer, error) {
	var tarBytes bytes.Buffer
	if err := writeTar(&tarBytes, files, mtime); err != nil {
		return nil, err
	}
	raw := tarBytes.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
