package stdterraform

import (
	"crypto/md5" //nolint:gosec // Azure's Content-MD5 is an MD5
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// blobStandIn serves blobs as the Blob REST API's Get Blob does, to requests signed
// with the account's shared key; a blob's stored Content-MD5 can be set apart from its
// bytes, to play a corrupted store.
type blobStandIn struct {
	account string
	blobs   map[string][]byte // "container/blob"
	md5s    map[string][]byte
}

func (b *blobStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("x-ms-version", "2025-01-05")
	w.Header().Set("x-ms-request-id", "test")
	if !strings.HasPrefix(r.Header.Get("Authorization"), "SharedKey "+b.account+":") {
		w.Header().Set("x-ms-error-code", "NoAuthenticationInformation")
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/"+b.account+"/")
	body, found := b.blobs[name]
	if r.Method != http.MethodGet || !ok || !found {
		w.Header().Set("x-ms-error-code", "BlobNotFound")
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="utf-8"?><Error><Code>BlobNotFound</Code><Message>The specified blob does not exist.</Message></Error>`))
		return
	}
	sum := md5.Sum(body) //nolint:gosec // see the import
	md5sum := sum[:]
	if m, ok := b.md5s[name]; ok {
		md5sum = m
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Content-MD5", base64.StdEncoding.EncodeToString(md5sum))
	w.Header().Set("x-ms-blob-type", "BlockBlob")
	w.Header().Set("ETag", `"0x8D0000000000001"`)
	w.Header().Set("Last-Modified", "Fri, 04 Dec 2026 12:00:00 GMT")
	_, _ = w.Write(body)
}

// TestAzureBlobSource applies a module fetched from an in-process stand-in of the Blob
// REST API, the identity a shared-key connection string in
// AZURE_STORAGE_CONNECTION_STRING: the blob's Content-MD5 is checked (a store whose
// MD5 differs from the bytes is refused terminally); a missing blob is transient.
func TestAzureBlobSource(t *testing.T) {
	needTerraform(t)
	good := tarGz(t, entry{name: "mod/main.tf", body: outputModule("azblob")})
	const account = "devstoreaccount1"
	srv := httptest.NewServer(&blobStandIn{
		account: account,
		blobs:   map[string][]byte{"modules/team/mod.tar.gz": good, "modules/corrupt.tar.gz": good},
		md5s:    map[string][]byte{"modules/corrupt.tar.gz": make([]byte, 16)},
	})
	t.Cleanup(srv.Close)
	key := base64.StdEncoding.EncodeToString([]byte("a test key, not a secret"))
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "DefaultEndpointsProtocol=http;AccountName="+account+
		";AccountKey="+key+";BlobEndpoint="+srv.URL+"/"+account+";")

	p := New("stdterraform")
	wantFrom(t, p, "azblob://"+account+"/modules/team/mod.tar.gz//mod", "azblob")
	checkFailures(t, p, []failure{
		{"missing blob", "azblob://" + account + "/modules/nope.tar.gz", nil, false, "BlobNotFound"},
		{"stored md5 differs", "azblob://" + account + "/modules/corrupt.tar.gz", nil, true, "md5 (the store's)"},
		{"no blob", "azblob://" + account + "/modules", nil, true, "is not azblob://<account>/<container>/<blob>"},
	})
}
