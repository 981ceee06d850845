package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestListMemoryIsBounded is issue 34's reproduction of unbounded list
// pages, scaled to a loaded 2-core machine with the same per-request
// shape: a real converge process (ROLE control, tokens on) holding 24
// resources of 1 MiB specs, and 8 read-token clients paging GET
// /resources?limit=1000 to the end, twice each, all at once. Before list
// pages had a byte budget every request held a 24 MiB page, several times
// over while it was encoded, and the process's peak resident set rose by
// far more than the bound (8 requests x 24 MiB is 192 MiB before any
// copy). With LIST_PAGE_BYTES=1 MiB a page holds one such resource, and
// the peak may rise by at most listMemoryBound: 8 requests x (a page
// read, its items, its encoding and the response buffer: about 4 MiB)
// doubled for the garbage collector's headroom, plus 32 MiB of slack for
// goroutines, connection buffers and allocator rounding.
func TestListMemoryIsBounded(t *testing.T) {
	t.Parallel()
	const (
		resources  = 24
		specBytes  = 1 << 20
		clients    = 8
		passes     = 2
		pageBudget = 1 << 20
		// listMemoryBound is the rise of the peak RSS allowed (see above).
		listMemoryBound = clients*4*pageBudget*2 + 32<<20
		readToken       = "read-token-for-the-list-memory-test"
		adminToken      = "admin-token-for-the-list-memory-test"
	)
	p := startProcess(t, pgtest.New(t).DSN, processOpts{env: []string{"ROLE=control", "LIST_PAGE_BYTES=" + strconv.Itoa(pageBudget),
		"CONVERGE_READ_TOKENS=" + readToken, "CONVERGE_ADMIN_TOKENS=" + adminToken, "LOG_LEVEL=warn"}})
	base, pid := "http://"+p.addr, p.cmd.Process.Pid

	send := func(method, path, token string, body []byte) (*http.Response, error) {
		req, err := http.NewRequestWithContext(t.Context(), method, base+"/api/v1"+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		return http.DefaultClient.Do(req)
	}
	write := func(method, path string, body any, want int) {
		t.Helper()
		raw, err := json.Marshal(body)
		must(t, err)
		resp, err := send(method, path, adminToken, raw)
		must(t, err)
		answer, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, answer, want)
		}
	}
	write(http.MethodPut, "/kinds/blob/manifest", map[string]any{"kind": "blob", "kind_version": 1, "reactions": []any{}}, http.StatusCreated)
	blob := make([]byte, specBytes*3/4)
	for i := range resources {
		_, _ = rand.Read(blob) // incompressible, as a real document's bytes may be
		write(http.MethodPost, "/resources", map[string]any{"kind": "blob", "kind_version": 1, "name": fmt.Sprintf("b%02d", i),
			"spec": map[string]string{"data": base64.StdEncoding.EncodeToString(blob)}}, http.StatusCreated)
	}

	// The peak from here on: writing 5 to clear_refs resets VmHWM to the
	// current resident set.
	must(t, os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0))
	before := peakRSS(t, pid)

	var g errgroup.Group
	for c := range clients {
		g.Go(func() error {
			for pass := range passes {
				listed, pages, cursor := 0, 0, ""
				for {
					path := "/resources?limit=1000"
					if cursor != "" {
						path += "&cursor=" + cursor
					}
					resp, err := send(http.MethodGet, path, readToken, nil)
					if err != nil {
						return err
					}
					var page struct {
						Items []struct {
							Name string `json:"name"`
						} `json:"items"`
						NextCursor string `json:"next_cursor"`
					}
					err = json.NewDecoder(resp.Body).Decode(&page)
					_ = resp.Body.Close()
					if err != nil || resp.StatusCode != http.StatusOK {
						return fmt.Errorf("client %d pass %d: GET %s = %d, %v", c, pass, path, resp.StatusCode, err)
					}
					listed, pages, cursor = listed+len(page.Items), pages+1, page.NextCursor
					if cursor == "" {
						break
					}
				}
				if listed != resources {
					return fmt.Errorf("client %d pass %d listed %d resources in %d pages, want %d", c, pass, listed, pages, resources)
				}
			}
			return nil
		})
	}
	must(t, g.Wait())
	peak := peakRSS(t, pid)
	t.Logf("converge peak RSS: %.1f MiB before the lists, %.1f MiB during them (+%.1f MiB; bound +%d MiB)",
		float64(before)/(1<<20), float64(peak)/(1<<20), float64(peak-before)/(1<<20), listMemoryBound>>20)
	if peak-before > listMemoryBound {
		t.Errorf("%d concurrent lists of %d x 1 MiB resources raised the peak RSS by %.1f MiB, over the %d MiB bound",
			clients, resources, float64(peak-before)/(1<<20), listMemoryBound>>20)
	}
}
