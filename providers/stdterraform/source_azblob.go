package stdterraform

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// openAzureBlob GETs azblob://account/container/blob. The identity is the ambient one:
// AZURE_STORAGE_CONNECTION_STRING when it names this account (a shared key or SAS, and
// its BlobEndpoint, e.g. an emulator's), else DefaultAzureCredential (AZURE_* service
// principal or workload identity, managed identity, the az CLI's login) against
// https://<account>.blob.core.windows.net. The blob's Content-MD5, when it has one, is
// the digest the store vouches for. A missing container or blob is transient, like any
// other failed request.
func openAzureBlob(ctx context.Context, u *url.URL) (object, error) {
	account := u.Host
	container, blob, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if container == "" || blob == "" {
		return object{}, fmt.Errorf("%w: %s is not azblob://<account>/<container>/<blob>", errContent, u.Redacted())
	}
	var client *azblob.Client
	var err error
	if cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" && connectionAccount(cs) == account {
		client, err = azblob.NewClientFromConnectionString(cs, nil)
	} else {
		var cred *azidentity.DefaultAzureCredential
		if cred, err = azidentity.NewDefaultAzureCredential(nil); err == nil {
			client, err = azblob.NewClient("https://"+account+".blob.core.windows.net/", cred, nil)
		}
	}
	if err != nil {
		return object{}, fmt.Errorf("azure client: %w", err)
	}
	resp, err := client.DownloadStream(ctx, container, blob, nil)
	if err != nil {
		return object{}, fmt.Errorf("get azblob://%s/%s/%s: %w", account, container, blob, err)
	}
	obj := object{body: resp.Body}
	for _, sum := range [][]byte{resp.ContentMD5, resp.BlobContentMD5} {
		if len(sum) == 16 {
			obj.md5 = sum
			break
		}
	}
	return obj, nil
}

// connectionAccount is the AccountName of an Azure Storage connection string.
func connectionAccount(cs string) string {
	for _, kv := range strings.Split(cs, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.EqualFold(strings.TrimSpace(k), "AccountName") {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
