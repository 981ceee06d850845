package logbuf

import (
	"strings"
	"sync"
	"testing"
)

func TestConcurrentWritesAllLand(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, err := b.Write([]byte("x\n")); err != nil {
					t.Error(err)
				}
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "x\n"); got != 800 {
		t.Fatalf("%d lines written, want 800", got)
	}
	if b.Len() != 1600 {
		t.Fatalf("Len = %d, want 1600", b.Len())
	}
}
