package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAudit: conctl audit lists the server's audit trail with its filters
// and pages, and refuses bad filters before asking the server.
func TestAudit(t *testing.T) {
	t.Parallel()
	b := setupWith(t, apiOptions{auth: true})
	b.env[EnvToken] = testAdminToken
	b.seed(t, "manifest", manifestVPC1)
	b.seed(t, "res", `{"kind": "vpc", "kind_version": 1, "name": "v1", "spec": {"cidr": "10.0.0.0/16"}}`)
	b.seed(t, "res", `{"kind": "vpc", "kind_version": 1, "name": "v1", "spec": {"cidr": "10.1.0.0/16"}}`)
	// A refused write: a read token may not delete.
	b.env[EnvToken] = testReadToken
	wantCode(t, b.run(t, "", "delete", "resource", "vpc/v1"), ExitFailure)
	b.env[EnvToken] = testAdminToken
	b.api.forget()

	t.Run("table", func(t *testing.T) {
		r := b.run(t, "", "audit")
		wantCode(t, r, ExitOK)
		wantRequests(t, b, "GET /audit")
		b.api.forget()
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 5 || !strings.Contains(lines[0], "SUBJECT") || !strings.Contains(lines[0], "VERSIONS") {
			t.Fatalf("want a header and 4 entries (manifest, two applies, the refused delete):\n%s", r.stdout)
		}
		if !strings.Contains(lines[1], "DELETE") || !strings.Contains(lines[1], "vpc/v1") || !strings.Contains(lines[1], "refused") {
			t.Errorf("newest entry %q, want the refused DELETE of vpc/v1", lines[1])
		}
		if !strings.Contains(lines[2], "token:admin-0") || !strings.Contains(lines[2], "vpc/v1") || strings.Contains(lines[2], " -->") {
			t.Errorf("entry %q, want the update of vpc/v1 by token:admin-0 with both versions", lines[2])
		}
	})
	t.Run("filters", func(t *testing.T) {
		r := b.run(t, "", "audit", "--object", "vpc/v1", "--subject", "token:admin-0", "--outcome", "ok",
			"--since", "2026-01-01T00:00:00Z", "--until", "2999-01-01T00:00:00Z", "-o", "json")
		wantCode(t, r, ExitOK)
		wantRequests(t, b, "GET /audit?kind=vpc&name=v1&outcome=ok&since=2026-01-01T00%3A00%3A00Z&subject=token%3Aadmin-0&until=2999-01-01T00%3A00%3A00Z")
		b.api.forget()
		var got struct {
			Items []struct {
				ObjectName    string `json:"object_name"`
				VersionBefore *int64 `json:"version_before"`
				VersionAfter  *int64 `json:"version_after"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Items) != 2 || got.Items[0].VersionBefore == nil || got.Items[1].VersionBefore != nil ||
			*got.Items[0].VersionBefore != *got.Items[1].VersionAfter {
			t.Fatalf("items %s, want the update (from the create's version) and the create", r.stdout)
		}
	})
	t.Run("pages", func(t *testing.T) {
		r := b.run(t, "", "audit", "--limit", "3", "--all", "-o", "name")
		wantCode(t, r, ExitOK)
		if n := len(strings.Fields(r.stdout)); n != 4 {
			t.Fatalf("%d entries over pages of 3, want 4:\n%s", n, r.stdout)
		}
		if reqs := b.api.recorded(); len(reqs) != 2 {
			t.Fatalf("%d requests, want 2 pages", len(reqs))
		}
		b.api.forget()
	})
	t.Run("bad filters are usage errors", func(t *testing.T) {
		for _, args := range [][]string{{"--outcome", "maybe"}, {"--since", "yesterday"}, {"--until", "soon"}, {"--object", "/"}} {
			wantCode(t, b.run(t, "", append([]string{"audit"}, args...)...), ExitUsage)
		}
		wantRequests(t, b)
	})
}
