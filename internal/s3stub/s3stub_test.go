package s3stub

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestMiniS3(t *testing.T) {
	t.Parallel()
	do := serveStub(t)
	if code, _ := do("PUT", "/converge-demo/status/a-1.json", "{}"); code != http.StatusNotFound {
		t.Errorf("PUT into a missing bucket = %d, want 404", code)
	}
	if code, body := do("PUT", "/converge-demo", ""); code != http.StatusOK {
		t.Fatalf("PUT bucket = %d %s", code, body)
	}
	if code, _ := do("PUT", "/converge-demo/status/a-1.json", `{"ready":3}`); code != http.StatusOK {
		t.Errorf("PUT object = %d", code)
	}
	// As the AWS SDK sends it: aws-chunked with a checksum trailer.
	chunked := "b\r\n{\"ready\":5}\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"
	if code, body := do("PUT", "/converge-demo/status/a-2.json", chunked, "Content-Encoding", "aws-chunked"); code != http.StatusOK {
		t.Errorf("PUT aws-chunked object = %d %s", code, body)
	}
	do("PUT", "/converge-demo/other/x", "x")
	if code, body := do("GET", "/converge-demo/status/a-2.json", ""); code != http.StatusOK || body != `{"ready":5}` {
		t.Errorf("GET = %d %q", code, body)
	}
	code, body := do("GET", "/converge-demo?list-type=2&prefix=status/", "")
	if code != http.StatusOK || !strings.Contains(body, "<KeyCount>2</KeyCount>") ||
		!strings.Contains(body, "<Key>status/a-1.json</Key>") || !strings.Contains(body, "<Key>status/a-2.json</Key>") ||
		strings.Contains(body, "other/x") {
		t.Errorf("LIST = %d %s", code, body)
	}
	if code, _ := do("GET", "/converge-demo/status/none", ""); code != http.StatusNotFound {
		t.Errorf("GET a missing key = %d, want 404", code)
	}
}

// TestMiniS3WithTheSDK drives the in-process store with the S3 client
// statussink uses: its reachability check, a write and a listing.
func TestMiniS3WithTheSDK(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(New())
	t.Cleanup(srv.Close)
	client := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("demo", "demo", "")})
	if _, err := client.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String("converge-demo")}); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}
	if _, err := client.HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String("converge-demo")}); err != nil {
		t.Fatalf("HeadBucket: %v", err)
	}
	if _, err := client.HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String("nope")}); err == nil {
		t.Error("HeadBucket of a missing bucket succeeded")
	}
	if _, err := client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("converge-demo"), Key: aws.String("status/a-1.json"),
		Body: strings.NewReader(`{"ready":1}`)}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	out, err := client.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String("converge-demo"), Prefix: aws.String("status/")})
	if err != nil || len(out.Contents) != 1 || aws.ToString(out.Contents[0].Key) != "status/a-1.json" {
		t.Fatalf("ListObjectsV2 = %+v, %v", out, err)
	}
}

// TestMiniS3ForTerraform: what Terraform's S3 backend asks besides reads and
// writes. A conditional write of a lock that exists is refused (412), HEAD
// and DELETE answer as S3 does, and STS says who the caller is.
func TestMiniS3ForTerraform(t *testing.T) {
	t.Parallel()
	do := serveStub(t)
	do("PUT", "/state", "")
	lock := "/state/converge/id/terraform.tfstate.tflock"
	if code, body := do("PUT", lock, `{"ID":"a"}`, "If-None-Match", "*"); code != http.StatusOK {
		t.Fatalf("the first lock = %d %s", code, body)
	}
	if code, body := do("PUT", lock, `{"ID":"b"}`, "If-None-Match", "*"); code != http.StatusPreconditionFailed || !strings.Contains(body, "PreconditionFailed") {
		t.Errorf("a second lock = %d %s, want 412 PreconditionFailed", code, body)
	}
	if code, body := do("GET", lock, ""); code != http.StatusOK || body != `{"ID":"a"}` {
		t.Errorf("the lock holds %d %q, want the first", code, body)
	}
	if code, body := do("HEAD", lock, ""); code != http.StatusOK || body != "" {
		t.Errorf("HEAD = %d %q", code, body)
	}
	if code, _ := do("DELETE", lock, ""); code != http.StatusNoContent {
		t.Errorf("DELETE = %d, want 204", code)
	}
	if code, _ := do("HEAD", lock, ""); code != http.StatusNotFound {
		t.Errorf("HEAD after DELETE = %d, want 404", code)
	}
	if code, _ := do("DELETE", lock, ""); code != http.StatusNoContent {
		t.Errorf("a second DELETE = %d, want 204", code)
	}
	if code, _ := do("PUT", lock, `{"ID":"b"}`, "If-None-Match", "*"); code != http.StatusOK {
		t.Errorf("locking again after the unlock = %d", code)
	}
	code, body := do("POST", "/", "Action=GetCallerIdentity&Version=2011-06-15", "Content-Type", "application/x-www-form-urlencoded")
	if code != http.StatusOK || !strings.Contains(body, "<Account>"+Account+"</Account>") {
		t.Errorf("GetCallerIdentity = %d %s", code, body)
	}
	if code, _ := do("POST", "/", "Action=AssumeRole", "Content-Type", "application/x-www-form-urlencoded"); code != http.StatusNotImplemented {
		t.Errorf("AssumeRole = %d, want 501", code)
	}
}

// serveStub serves a new store for the test and returns a function that sends
// it one request (header: name, value pairs) and returns the status and body.
func serveStub(t *testing.T) func(method, path, body string, header ...string) (int, string) {
	srv := httptest.NewServer(New())
	t.Cleanup(srv.Close)
	return func(method, path, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}
