package cli

import (
	"strings"
	"testing"
)

// TestRoleBindingCommands: role bindings created from flags, listed by
// namespace and across every namespace, shown and deleted against the real
// API; a refused binding names the field, and bad flags are usage errors.
func TestRoleBindingCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantCode(t, b.run(t, "", "create", "namespace", "team-a"), ExitOK)
	r := b.run(t, "", "create", "rolebinding", "alice-edits", "--role", "editor", "--user", "alice", "--namespace", "team-a")
	wantCode(t, r, ExitOK)
	if r.stdout != "rolebinding/alice-edits created\n" {
		t.Errorf("create:\n%s", r.stdout)
	}
	wantCode(t, b.run(t, "", "create", "rolebinding", "platform", "--role", "admin", "--group", "platform", "--cluster"), ExitOK)
	wantCode(t, b.run(t, "", "create", "rolebinding", "bob", "--role", "viewer", "--user", "bob"), ExitOK)

	r = b.run(t, "", "get", "rolebindings", "--namespace", "team-a")
	wantCode(t, r, ExitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "user:alice") || !strings.Contains(lines[1], "team-a") ||
		!strings.Contains(lines[2], "group:platform") || !strings.Contains(lines[2], "cluster-wide") {
		t.Fatalf("get rolebindings --namespace team-a:\n%s", r.stdout)
	}
	r = b.run(t, "", "get", "rolebindings", "--all-namespaces", "-o", "name")
	wantCode(t, r, ExitOK)
	if got := strings.Fields(r.stdout); len(got) != 3 {
		t.Errorf("get rolebindings --all-namespaces:\n%s", r.stdout)
	}
	r = b.run(t, "", "get", "rolebinding", "bob", "-o", "json")
	wantCode(t, r, ExitOK)
	if !strings.Contains(r.stdout, `"namespace": "default"`) || !strings.Contains(r.stdout, `"role": "viewer"`) {
		t.Errorf("get rolebinding bob:\n%s", r.stdout)
	}

	r = b.run(t, "", "create", "rolebinding", "x", "--role", "root", "--user", "x")
	wantCode(t, r, ExitFailure)
	if !strings.Contains(r.stderr, "body.role") {
		t.Errorf("a bad role: stderr = %q, want body.role named", r.stderr)
	}
	for _, args := range [][]string{
		{"create", "rolebinding", "x", "--user", "x"},
		{"create", "rolebinding", "x", "--role", "viewer"},
		{"create", "rolebinding", "x", "--role", "viewer", "--user", "x", "--group", "g"},
		{"create", "rolebinding", "x", "--role", "viewer", "--user", "x", "--cluster", "--namespace", "a"},
	} {
		wantCode(t, b.run(t, "", args...), ExitUsage)
	}

	wantCode(t, b.run(t, "", "delete", "rolebinding", "alice-edits", "bob"), ExitOK)
	r = b.run(t, "", "get", "rolebindings", "--all-namespaces", "-o", "name")
	wantCode(t, r, ExitOK)
	if got := strings.Fields(r.stdout); len(got) != 1 || !strings.Contains(got[0], "platform") {
		t.Errorf("after the delete:\n%s", r.stdout)
	}
}
