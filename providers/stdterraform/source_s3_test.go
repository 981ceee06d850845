package stdterraform

import (
	"archive/tar"
	"bytes"
	"crypto/md5" //nolint:gosec // S3's ETag is an MD5
	"crypto/sha256"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/convergeplane/converge/internal/testkit/awstest"
)

// TestS3Source applies modules fetched from S3 (moto_server) with the ambient AWS
// chain: one stored with a SHA-256 checksum, one with only its ETag, both checked on
// the way in. A missing key or bucket (a 404 to the HEAD) is transient; a ?checksum= the object does not
// match is terminal.
func TestS3Source(t *testing.T) {
	needTerraform(t)
	awstest.Start(t)
	ctx := t.Context()
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("modules")}); err != nil {
		t.Fatal(err)
	}
	tgz := tarGz(t, entry{name: "pkg/mod/main.tf", body: outputModule("s3")})
	zipped := zipOf(t, entry{name: "main.tf", body: outputModule("s3 zip")})
	for key, put := range map[string]*s3.PutObjectInput{
		"team/mod.tar.gz": {Body: bytes.NewReader(tgz), ChecksumAlgorithm: types.ChecksumAlgorithmSha256},
		"team/mod.zip":    {Body: bytes.NewReader(zipped)},
	} {
		put.Bucket, put.Key = aws.String("modules"), aws.String(key)
		if _, err := client.PutObject(ctx, put); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}

	// The store's digests come back with the object and are the archive's.
	sha, sum := sha256.Sum256(tgz), md5.Sum(tgz) //nolint:gosec // see the import
	obj, err := openS3(ctx, &url.URL{Scheme: "s3", Host: "modules", Path: "/team/mod.tar.gz"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, obj.body); err != nil {
		t.Fatal(err)
	}
	obj.body.Close()
	if !bytes.Equal(obj.sha, sha[:]) || !bytes.Equal(obj.md5, sum[:]) {
		t.Errorf("object digests sha256 %x md5 %x, want %x %x", obj.sha, obj.md5, sha, sum)
	}

	p := New("stdterraform")
	wantFrom(t, p, "s3://modules/team/mod.tar.gz//pkg/mod", "s3")
	wantFrom(t, p, "s3://modules/team/mod.zip?region=us-east-1", "s3 zip")
	checkFailures(t, p, []failure{
		{"missing key", "s3://modules/team/nope.tar.gz", nil, false, "NotFound"},
		{"missing bucket", "s3://nobucket/mod.tar.gz", nil, false, "NotFound"},
		{"no key", "s3://modules", nil, true, "names no key"},
		{"wrong checksum", "s3://modules/team/mod.zip?checksum=sha256:" + strings.Repeat("ab", 32), nil, true, "sha256 (?checksum=)"},
	})
}

// TestDownloadDigests: an archive whose bytes differ from the digest its store vouches
// for is refused terminally, whichever digest it is.
func TestDownloadDigests(t *testing.T) {
	body := tarGz(t, entry{name: "main.tf", body: outputModule("x")}, entry{name: "d/", typ: tar.TypeDir})
	sha, sum := sha256.Sum256(body), md5.Sum(body) //nolint:gosec // see the import
	bad := make([]byte, 32)
	for _, tc := range []struct {
		name string
		obj  object
		want string
	}{
		{"both match", object{sha: sha[:], md5: sum[:]}, ""},
		{"store sha256", object{sha: bad}, "sha256 (the store's)"},
		{"store md5", object{md5: bad[:16]}, "md5 (the store's)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "a"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tc.obj.body = io.NopCloser(bytes.NewReader(body))
			err = download(f, tc.obj, nil, 1<<20)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), errContent.Error()) {
				t.Errorf("download = %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
}
