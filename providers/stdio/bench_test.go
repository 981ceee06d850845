package stdio_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/convergeplane/converge/providers/stdio"
	"github.com/convergeplane/converge/webhooksdk"
)

// BenchmarkWork reports one task's cost through stdio — spawning `/bin/cat resp.json`,
// which prints a canned response — beside the in-process no-op provider: the
// difference is the per-task process overhead.
func BenchmarkWork(b *testing.B) {
	resp := filepath.Join(b.TempDir(), "resp.json")
	if err := os.WriteFile(resp, []byte(`{"status":{}}`), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"command": "/bin/cat", "args": []string{resp}})
	req := request("work", cfg)
	// noop is an in-process provider doing nothing: the baseline stdio's spawn cost is
	// measured against.
	noop := webhooksdk.WorkFunc("noop", 1, func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
		return webhooksdk.Outcome{Status: json.RawMessage(`{}`)}, nil
	})
	for _, bc := range []struct {
		name string
		p    webhooksdk.Provider
	}{{"noop", noop}, {"stdio-cat", stdio.New("stdio")}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := bc.p.Work(b.Context(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
