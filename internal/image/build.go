package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// rdsCAFetchTimeout bounds the download of the RDS CA bundle, which a
// machine without internet access never completes.
const rdsCAFetchTimeout = 20 * time.Second

// binaryFlags collects the repeated -binary os/arch=path flags.
type binaryFlags []string

func (b *binaryFlags) String() string     { return strings.Join(*b, ",") }
func (b *binaryFlags) Set(s string) error { *b = append(*b, s); return nil }

// runBuild is the build subcommand (see the package doc).
func runBuild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var bins binaryFlags
	fs.Var(&bins, "binary", "os/arch=path of a static converge binary (repeat per platform)")
	out := fs.String("out", "bin/image/oci", "the OCI layout directory to write (replaced)")
	var cfg imageConfig
	fs.StringVar(&cfg.Version, "version", "", "the version label (what `converge version` prints)")
	fs.StringVar(&cfg.Source, "source", "", "the source repository URL label")
	fs.StringVar(&cfg.Revision, "revision", "", "the commit the binaries were built from")
	created := fs.Int64("created", -1, "the build time, in Unix seconds (SOURCE_DATE_EPOCH or the commit's time)")
	rdsCA := fs.String("rds-ca", "", "the RDS CA bundle: a file or an https URL (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var missing []string
	for _, f := range []struct{ name, value string }{{"-version", cfg.Version}, {"-source", cfg.Source}, {"-revision", cfg.Revision}} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if *created < 0 {
		missing = append(missing, "-created")
	}
	if len(bins) == 0 {
		missing = append(missing, "-binary")
	}
	if len(missing) > 0 || fs.NArg() > 0 {
		return fmt.Errorf("%v required, no arguments taken", missing)
	}
	cfg.Created = time.Unix(*created, 0).UTC()
	cfg.CACerts = mozillaRoots()

	var platforms []platformBinary
	for _, b := range bins {
		pb, err := readBinary(b)
		if err != nil {
			return err
		}
		platforms = append(platforms, pb)
	}
	if *rdsCA != "" {
		b, err := loadRDSCA(ctx, *rdsCA)
		if err != nil {
			fmt.Fprintf(stderr, "%s\nimage build: WARNING: THE IMAGE HAS NO RDS CA BUNDLE (%s):\n"+
				"  %v\n  a DATABASE_URL with sslrootcert=%s (infra/'s) cannot connect to RDS;\n"+
				"  download it where the internet is reachable and build with RDS_CA_BUNDLE=that-file.\n%s\n",
				banner, rdsCAPath, err, rdsCAPath, banner)
		} else {
			cfg.RDSCA = b
		}
	}

	idx, err := assemble(cfg, platforms)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	p, err := layout.Write(*out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": cfg.Version})); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return describe(stdout, *out, idx)
}

// banner frames the warning about a missing RDS CA bundle.
const banner = "image build: ********************************************************************"

// readBinary reads one -binary os/arch=path and checks it is a static
// executable for that platform.
func readBinary(spec string) (platformBinary, error) {
	plat, path, ok := strings.Cut(spec, "=")
	p, err := v1.ParsePlatform(plat)
	if !ok || err != nil {
		return platformBinary{}, fmt.Errorf("-binary %q: want os/arch=path", spec)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return platformBinary{}, err
	}
	if err := checkStatic(b, *p); err != nil {
		return platformBinary{}, fmt.Errorf("%s: %w", path, err)
	}
	return platformBinary{Platform: *p, Binary: b}, nil
}

// loadRDSCA reads the RDS CA bundle from a file or an https URL and checks
// it holds certificates.
func loadRDSCA(ctx context.Context, src string) ([]byte, error) {
	var b []byte
	var err error
	if strings.HasPrefix(src, "https://") {
		b, err = download(ctx, src)
	} else {
		b, err = os.ReadFile(src)
	}
	if err != nil {
		return nil, err
	}
	n := 0
	for rest := b; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); block.Type != "CERTIFICATE" || err != nil {
			return nil, fmt.Errorf("%s: PEM block %d is not a certificate", src, n+1)
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no PEM certificate in it", src)
	}
	return b, nil
}

// download GETs url within rdsCAFetchTimeout.
func download(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, rdsCAFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 4<<20))
}

// describe prints what was written: the index digest, then each image's
// platform, digest and compressed size.
func describe(w io.Writer, dir string, idx v1.ImageIndex) error {
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: image index %s (%s %s)\n", dir, d, labelVersion, m.Annotations[labelVersion])
	if m.Annotations[labelRDSCA] == "none" {
		fmt.Fprintf(w, "  WITHOUT the RDS CA bundle (%s)\n", rdsCAPath)
	}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		size, err := imageSize(img)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %-12s %s  %s bytes compressed\n", desc.Platform, desc.Digest, strconv.FormatInt(size, 10))
	}
	return nil
}

// imageSize is what a pull downloads: the config and the compressed layers.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	total := m.Config.Size
	for _, l := range m.Layers {
		total += l.Size
	}
	if total == 0 {
		return 0, errors.New("empty manifest")
	}
	return total, nil
}
