package stdterraform

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// openS3 GETs s3://bucket/key with the ambient AWS chain (environment, shared files,
// IRSA, instance metadata); ?region= overrides the ambient region, and
// AWS_ENDPOINT_URL(_S3) an S3-compatible store (addressed path-style). A HEAD first
// gives the digests S3 vouches for: the ChecksumSHA256 when the object was stored with
// one, and the ETag when that is the plain MD5 of its bytes (a single-part upload, not
// SSE-KMS or SSE-C); the GET is If-Match that ETag. A missing bucket or key is
// transient, like any other failed request.
func openS3(ctx context.Context, u *url.URL) (object, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if r := u.Query().Get("region"); r != "" {
		opts = append(opts, awsconfig.WithRegion(r))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return object{}, fmt.Errorf("AWS config: %w", err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = o.BaseEndpoint != nil
		// The digests are checked here, after the download, where a mismatch is
		// told from a failed read: the SDK's own check would fail the read.
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	bucket, key := u.Host, strings.TrimPrefix(u.Path, "/")
	if key == "" {
		return object{}, fmt.Errorf("%w: %s names no key", errContent, u.Redacted())
	}
	head, err := client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		return object{}, fmt.Errorf("head s3://%s/%s: %w", bucket, key, err)
	}
	// If-Match: the bytes are the version whose digests the HEAD gave.
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), IfMatch: head.ETag})
	if err != nil {
		return object{}, fmt.Errorf("get s3://%s/%s: %w", bucket, key, err)
	}
	obj := object{body: out.Body}
	if c := aws.ToString(head.ChecksumSHA256); c != "" && head.ChecksumType != types.ChecksumTypeComposite {
		if sum, err := base64.StdEncoding.DecodeString(c); err == nil {
			obj.sha = sum
		}
	}
	etag := strings.Trim(aws.ToString(head.ETag), `"`)
	kms := head.ServerSideEncryption == types.ServerSideEncryptionAwsKms || head.ServerSideEncryption == types.ServerSideEncryptionAwsKmsDsse
	if sum, err := hex.DecodeString(etag); err == nil && len(sum) == 16 && !kms && head.SSECustomerAlgorithm == nil {
		obj.md5 = sum
	}
	return obj, nil
}
