package ui_test

import (
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/convergeplane/converge/ui"
)

// TestFilesAlwaysHaveAnIndex: a binary serves either the console `make ui`
// built or the placeholder saying how to build it, never nothing.
func TestFilesAlwaysHaveAnIndex(t *testing.T) {
	t.Parallel()
	files, built := ui.Files()
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		t.Fatalf("the embedded console has no index.html: %v", err)
	}
	_, statErr := os.Stat("site/dist/index.html")
	if built != (statErr == nil) {
		t.Fatalf("Files says built=%v, but site/dist/index.html: %v", built, statErr)
	}
	if !built && !strings.Contains(string(index), "make ui") {
		t.Errorf("the placeholder does not say how to build the console: %s", index)
	}
	if built {
		if _, err := fs.Stat(files, "placeholder"); err == nil {
			t.Error("the built console also serves the placeholder directory")
		}
	}
}
