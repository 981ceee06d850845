package provider

import (
	"slices"
	"testing"

	"github.com/convergeplane/converge/webhooksdk"
)

// TestReadinessSwitch: a kind UNREADY_KINDS names reports not ready through
// its provider's Ready until it is switched back; the others stay ready.
func TestReadinessSwitch(t *testing.T) {
	t.Parallel()
	ready, err := ParseUnready(" cdn ,")
	if err != nil {
		t.Fatal(err)
	}
	readyOf := func() map[string]bool {
		m := map[string]bool{}
		for _, p := range New(0, ready) {
			r, ok := p.(webhooksdk.Readier)
			if !ok {
				t.Fatalf("%s is no Readier", p.Kind())
			}
			m[p.Kind().Kind] = r.Ready()
		}
		return m
	}
	if got := readyOf(); got["cdn"] || !got["bucket"] || !got["site"] {
		t.Errorf("UNREADY_KINDS=cdn: ready = %v", got)
	}
	if got := ready.Unready(); !slices.Equal(got, []string{"cdn"}) {
		t.Errorf("Unready() = %q", got)
	}
	if err := ready.Set("cdn", true); err != nil {
		t.Fatal(err)
	}
	if got := readyOf(); !got["cdn"] {
		t.Errorf("after Set(cdn, true): ready = %v", got)
	}
	if _, err := ParseUnready("cdn,vpc"); err == nil {
		t.Error("UNREADY_KINDS=cdn,vpc accepted a kind these providers do not serve")
	}
	var none *Readiness
	if !none.Ready("cdn") || none.Unready() != nil {
		t.Error("a nil Readiness is not all ready")
	}
}
