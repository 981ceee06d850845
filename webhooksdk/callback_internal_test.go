package webhooksdk

import (
	"net/http"
	"testing"
)

// TestTraceParent: only a well-formed W3C traceparent is passed on; the header
// is not signed, so anything else is dropped.
func TestTraceParent(t *testing.T) {
	t.Parallel()
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for v, want := range map[string]string{
		ok: ok,
		"": "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0":    "", // short
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":   "", // upper case
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":   "", // version ff
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":   "", // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":   "", // zero parent id
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":   "", // separator
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n": "",
	} {
		h := http.Header{}
		h.Set("traceparent", v)
		if got := traceParent(h); got != want {
			t.Errorf("traceParent(%q) = %q, want %q", v, got, want)
		}
	}
}
