package stdterraform

import (
	"crypto/md5" //nolint:gosec // GCS's md5Hash is an MD5
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// gcsStandIn serves objects through the two calls of the GCS JSON API a module fetch
// makes: an object's metadata, and its bytes (?alt=media) with their x-goog-hash. An
// object's stored digests can be set apart from its bytes, to play a corrupted store.
type gcsStandIn struct {
	objects map[string][]byte // "bucket/name"
	md5s    map[string][]byte // a stored MD5 other than the bytes'
	crcs    map[string][]byte // a stored CRC32C other than the bytes'
}

func (g *gcsStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// /storage/v1/b/{bucket}/o/{object}, media under /download too.
	rest, ok := strings.CutPrefix(strings.TrimPrefix(r.URL.Path, "/download"), "/storage/v1/b/")
	bucket, name, ok2 := strings.Cut(rest, "/o/")
	body, found := g.objects[bucket+"/"+name]
	if r.Method != http.MethodGet || !ok || !ok2 || !found {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error": {"code": 404, "message": "No such object: ` + bucket + "/" + name + `"}}`))
		return
	}
	sum := md5.Sum(body) //nolint:gosec // see the import
	md5sum := sum[:]
	if m, ok := g.md5s[bucket+"/"+name]; ok {
		md5sum = m
	}
	crc := binary.BigEndian.AppendUint32(nil, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	if c, ok := g.crcs[bucket+"/"+name]; ok {
		crc = c
	}
	b64 := base64.StdEncoding.EncodeToString
	if r.URL.Query().Get("alt") == "media" {
		w.Header().Set("X-Goog-Hash", "crc32c="+b64(crc)+",md5="+b64(md5sum))
		w.Header().Set("X-Goog-Generation", "7")
		_, _ = w.Write(body)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "storage#object", "bucket": bucket, "name": name,
		"generation": "7", "size": strconv.Itoa(len(body)),
		"md5Hash": b64(md5sum), "crc32c": b64(crc)})
}

// TestGSSource applies a module fetched from GCS, a stand-in of its JSON API found
// through STORAGE_EMULATOR_HOST: the object's MD5 and CRC32C are checked (a store whose
// digest differs from the bytes is refused terminally); a missing object is transient.
func TestGSSource(t *testing.T) {
	needTerraform(t)
	good := tarGz(t, entry{name: "mod/main.tf", body: outputModule("gs")})
	g := &gcsStandIn{
		objects: map[string][]byte{"modules/team/mod.tar.gz": good, "modules/corrupt.tar.gz": good, "modules/crc.tar.gz": good},
		md5s:    map[string][]byte{"modules/corrupt.tar.gz": make([]byte, 16)},
		crcs:    map[string][]byte{"modules/crc.tar.gz": make([]byte, 4)},
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.URL, "http://"))

	p := New("stdterraform")
	wantFrom(t, p, "gs://modules/team/mod.tar.gz//mod", "gs")
	checkFailures(t, p, []failure{
		{"missing object", "gs://modules/nope.tar.gz", nil, false, "404 Not Found"},
		{"stored md5 differs", "gs://modules/corrupt.tar.gz", nil, true, "md5 (the store's)"},
		{"stored crc32c differs", "gs://modules/crc.tar.gz", nil, true, "crc32c (the store's)"},
		{"no object", "gs://modules", nil, true, "names no object"},
	})
}
