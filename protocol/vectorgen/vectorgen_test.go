package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestVectorsCurrent fails when the checked-in vectors in protocol/vectors are not
// exactly what the generator writes from the current code: a change to how the
// dispatcher builds or signs a request, or to a case, must come with `make vectors`.
func TestVectorsCurrent(t *testing.T) {
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	const dir = "../vectors"
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case err != nil:
			t.Errorf("%s: %v; run make vectors", name, err)
		case !bytes.Equal(got, want):
			t.Errorf("%s is stale; run make vectors", name)
		}
	}
	onDisk, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range onDisk {
		if _, ok := files[filepath.Base(f)]; !ok {
			t.Errorf("%s is no longer generated; run make vectors", filepath.Base(f))
		}
	}
}

// TestGenerateDeterministic: two runs write the same bytes (fixed clock, secrets, ids),
// so the staleness check above cannot flap.
func TestGenerateDeterministic(t *testing.T) {
	a, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	b, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("%d files, then %d", len(a), len(b))
	}
	for name := range a {
		if !bytes.Equal(a[name], b[name]) {
			t.Errorf("%s differs between two runs", name)
		}
	}
}
