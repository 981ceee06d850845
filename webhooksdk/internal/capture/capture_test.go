package capture_test

import (
	"net/http"
	"testing"

	"github.com/convergeplane/converge/webhooksdk/internal/capture"
)

func TestRecorder(t *testing.T) {
	r := capture.New()
	if r.Status != 0 {
		t.Fatalf("a fresh recorder's status = %d, want 0 (nothing written)", r.Status)
	}
	r.Header().Set("Content-Type", "application/json")
	if _, err := r.Write([]byte(`{"a":`)); err != nil {
		t.Fatal(err)
	}
	r.WriteHeader(http.StatusTeapot) // too late: the first write answered 200
	if _, err := r.Write([]byte(`1}`)); err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK || r.Body.String() != `{"a":1}` || r.Header().Get("Content-Type") != "application/json" {
		t.Errorf("recorded %d %q %v", r.Status, r.Body.String(), r.Header())
	}

	a := capture.New()
	a.WriteHeader(http.StatusAccepted)
	a.WriteHeader(http.StatusOK)
	if a.Status != http.StatusAccepted {
		t.Errorf("status = %d, want the first written, 202", a.Status)
	}
}
