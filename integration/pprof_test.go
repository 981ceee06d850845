package integration

import (
	"io"
	"net/http"
	"strings"
	"testing"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/internal/testkit/testnet"
)

// TestPprofListener: PPROF_ADDR serves net/http/pprof on its own listener,
// and the API listener does not serve it.
func TestPprofListener(t *testing.T) {
	t.Parallel()
	addr := testnet.FreeAddr(t)
	srv, _ := startOps(t, t.Context(), convergecli.RoleAll, func(c *convergecli.Config) { c.PprofAddr = addr })
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://" + addr + "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("pprof goroutine profile = %d %.200s", code, body)
	}
	if code, _ := get("http://" + srv.Addr() + "/debug/pprof/"); code == http.StatusOK {
		t.Fatalf("the API listener serves /debug/pprof/; it must stay on PPROF_ADDR only")
	}
}
