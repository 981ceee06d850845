package stdterraform

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
)

// gcsReadScope is the OAuth scope a module read needs.
const gcsReadScope = "https://www.googleapis.com/auth/devstorage.read_only"

// openGCS GETs gs://bucket/object through the Cloud Storage JSON API with Google's
// Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's, GKE
// Workload Identity, the metadata server); STORAGE_EMULATOR_HOST points it, without
// credentials, at an emulator, as Google's client libraries do. The object's metadata
// comes first, for the MD5 and CRC32C the store vouches for (a composite object has no
// MD5), then its bytes at that generation, so both are of one version. It speaks the
// API directly, with golang.org/x/oauth2/google for the credentials, rather than
// through cloud.google.com/go/storage: that library took stdprovider's binary from
// 28.5 MB to 74.6 MB (gRPC, OpenTelemetry and the rest) for these two GETs. A
// missing bucket or object, like any other failed request, is transient.
func openGCS(ctx context.Context, u *url.URL) (object, error) {
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" {
		return object{}, fmt.Errorf("%w: %s names no object", errContent, u.Redacted())
	}
	base, client := "https://storage.googleapis.com", &http.Client{}
	if host := os.Getenv("STORAGE_EMULATOR_HOST"); host != "" {
		base = host
		if !strings.Contains(host, "://") {
			base = "http://" + host
		}
	} else {
		ts, err := google.DefaultTokenSource(ctx, gcsReadScope)
		if err != nil {
			return object{}, fmt.Errorf("google credentials: %w", err)
		}
		client = oauth2.NewClient(ctx, ts)
	}
	where := fmt.Sprintf("gs://%s/%s", u.Host, name)
	meta := base + "/storage/v1/b/" + url.PathEscape(u.Host) + "/o/" + url.PathEscape(name)
	resp, err := gcsGet(ctx, client, meta)
	if err != nil {
		return object{}, fmt.Errorf("get %s: %w", where, err)
	}
	var attrs struct {
		Generation string `json:"generation"`
		MD5        string `json:"md5Hash"`
		CRC32C     string `json:"crc32c"`
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&attrs)
	resp.Body.Close()
	if err != nil {
		return object{}, fmt.Errorf("get %s: metadata: %w", where, err)
	}
	resp, err = gcsGet(ctx, client, meta+"?alt=media&generation="+url.QueryEscape(attrs.Generation))
	if err != nil {
		return object{}, fmt.Errorf("get %s: %w", where, err)
	}
	obj := object{body: resp.Body}
	if sum, err := base64.StdEncoding.DecodeString(attrs.MD5); err == nil && len(sum) == 16 {
		obj.md5 = sum
	}
	if sum, err := base64.StdEncoding.DecodeString(attrs.CRC32C); err == nil && len(sum) == 4 {
		obj.crc32c = sum
	}
	return obj, nil
}

// gcsGet GETs url; an answer but 200 is an error carrying the API's message.
func gcsGet(ctx context.Context, client *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}
