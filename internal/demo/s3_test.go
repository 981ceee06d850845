package demo

import (
	"net/http"
	"strings"
	"testing"
)

// TestStartS3 starts the stores the demos would (moto_server where this
// machine has it, and the embedded stand-in) and writes into the bucket
// each created.
func TestStartS3(t *testing.T) {
	t.Parallel()
	for _, embedded := range []bool{false, true} {
		endpoint, stop, err := startS3(t.Context(), t.TempDir(), embedded)
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
			t.Errorf("PUT into the demo bucket (embedded %v) = %s", embedded, resp.Status)
		}
	}
}
