package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// runPush is the push subcommand (see the package doc).
func runPush(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("layout", "bin/image/oci", "the OCI layout `make image` wrote")
	image := fs.String("image", "", "where to push: REGISTRY/REPO:TAG")
	allowNoRDS := fs.Bool("allow-no-rds-ca", false, "push an image built without the RDS CA bundle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *image == "" || fs.NArg() > 0 {
		return errors.New("-image REGISTRY/REPO:TAG required, no arguments taken")
	}
	ref, err := name.NewTag(*image)
	if err != nil {
		return err
	}
	idx, err := layoutIndex(*dir)
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if m.Annotations[labelRDSCA] == "none" && !*allowNoRDS {
		return fmt.Errorf("%s was built without the RDS CA bundle, so its DATABASE_URL's sslrootcert=%s (infra/'s) cannot connect: "+
			"rebuild with RDS_CA_BUNDLE=<global-bundle.pem>, or push with -allow-no-rds-ca (IMAGE_ALLOW_NO_RDS_CA=1)", *dir, rdsCAPath)
	}
	auth := remote.WithAuthFromKeychain(authn.DefaultKeychain)
	if pw := getenv("IMAGE_PASSWORD"); pw != "" {
		auth = remote.WithAuth(&authn.Basic{Username: cmp.Or(getenv("IMAGE_USERNAME"), "AWS"), Password: pw})
	}
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), auth); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pushed %s\n%s\n", ref, ref.Context().Digest(d.String()))
	return nil
}

// layoutIndex returns the image index a layout's index.json names (build
// writes exactly one).
func layoutIndex(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI layout (make image writes one): %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("%s/index.json: want one image index, found %d entries", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}
