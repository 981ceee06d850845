package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestDemoFor(t *testing.T) {
	t.Parallel()
	d, err := demoFor("classic", "large", 0.25)
	if err != nil {
		t.Fatal(err)
	}
	if d.binary != "classic-provider" || !slices.Equal(d.objects, []string{"objects", "--bom", "large"}) ||
		!slices.Contains(d.env, "FAKE_FAULT_RATE=0.25") || !d.s3 {
		t.Errorf("classic large 0.25 = %+v", d)
	}
	if d, err := demoFor("quickstart", "small", 0); err != nil || d.binary != "quickstart-provider" || d.s3 {
		t.Errorf("quickstart = %+v, %v", d, err)
	}
	for _, c := range []struct {
		name, bom string
		rate      float64
	}{{"classic", "huge", 0}, {"classic", "small", 1}, {"classic", "small", -0.1}, {"other", "small", 0}} {
		if _, err := demoFor(c.name, c.bom, c.rate); err == nil {
			t.Errorf("demoFor(%q, %q, %g) accepted", c.name, c.bom, c.rate)
		}
	}
}

func TestWithS3(t *testing.T) {
	t.Parallel()
	sink := json.RawMessage(`{"name":"sink","kind":"statussink","kind_version":1,"spec":{"endpoint":"x"}}`)
	got, err := withS3(sink, "http://127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	var pc struct {
		Name string         `json:"name"`
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(got, &pc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"endpoint": "http://127.0.0.1:9", "bucket": "converge-demo", "prefix": "status", "region": "us-east-1"}
	if pc.Name != "sink" || len(pc.Spec) != len(want) || pc.Spec["endpoint"] != want["endpoint"] || pc.Spec["bucket"] != want["bucket"] ||
		pc.Spec["prefix"] != want["prefix"] || pc.Spec["region"] != want["region"] {
		t.Errorf("statussink config = %s", got)
	}
	other := json.RawMessage(`{"name":"v","kind":"vpc","kind_version":1,"spec":{"a":1}}`)
	if got, err := withS3(other, "http://127.0.0.1:9"); err != nil || !bytes.Equal(got, other) {
		t.Errorf("a vpc config became %s, %v", got, err)
	}
	if _, err := withS3(sink, ""); err == nil {
		t.Error("a statussink config without an S3 store passed")
	}
}

func TestMiniS3(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(newMiniS3())
	t.Cleanup(srv.Close)
	do := func(method, path, body string, header ...string) (int, string) {
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
	if code, _ := do("PUT", "/converge-demo/status/a-1.json", "{}"); code != http.StatusNotFound {
		t.Errorf("PUT into a missing bucket = %d, want 404", code)
	}
	if err := createBucket(t.Context(), srv.URL, demoBucket); err != nil {
		t.Fatal(err)
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
	srv := httptest.NewServer(newMiniS3())
	t.Cleanup(srv.Close)
	if err := createBucket(t.Context(), srv.URL, demoBucket); err != nil {
		t.Fatal(err)
	}
	client := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("demo", "demo", "")})
	if _, err := client.HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String(demoBucket)}); err != nil {
		t.Fatalf("HeadBucket: %v", err)
	}
	if _, err := client.HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String("nope")}); err == nil {
		t.Error("HeadBucket of a missing bucket succeeded")
	}
	if _, err := client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(demoBucket), Key: aws.String("status/a-1.json"),
		Body: strings.NewReader(`{"ready":1}`)}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	out, err := client.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(demoBucket), Prefix: aws.String("status/")})
	if err != nil || len(out.Contents) != 1 || aws.ToString(out.Contents[0].Key) != "status/a-1.json" {
		t.Fatalf("ListObjectsV2 = %+v, %v", out, err)
	}
}

// TestStartS3 starts the store the demo would (moto_server where this
// machine has it) and writes into the bucket it created.
func TestStartS3(t *testing.T) {
	t.Parallel()
	endpoint, stop, err := startS3(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, endpoint+"/"+demoBucket+"/status/x-1.json", strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("PUT into the demo bucket = %s", resp.Status)
	}
}
