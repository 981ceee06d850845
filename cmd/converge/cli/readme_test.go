package cli

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeNamesOnlyRealSubcommands keeps the README's layout table honest:
// every `word` it lists for cmd/converge is a subcommand the binary has.
func TestReadmeNamesOnlyRealSubcommands(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "| `cmd/converge` |") {
			row = strings.TrimPrefix(l, "| `cmd/converge` |")
		}
	}
	if row == "" {
		t.Fatal("README has no cmd/converge row in its layout table")
	}
	root := newRoot(io.Discard, io.Discard, func(string) string { return "" })
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(row, -1) {
		if m[1] == "converge" {
			continue
		}
		if c, _, err := root.Find([]string{m[1]}); err != nil || c == root {
			t.Errorf("README lists `%s` for cmd/converge, but converge has no such subcommand", m[1])
		}
	}
}
