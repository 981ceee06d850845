// Package capture records the answer an http.Handler writes when no network
// connection takes it: the SDK serves each task of a batch into one, and the
// Lambda adapter serves each invocation into one.
package capture

import (
	"bytes"
	"net/http"
)

// Recorder is an http.ResponseWriter that keeps the first status written
// (0 if the handler wrote none), the headers and the body.
type Recorder struct {
	header http.Header
	Status int
	Body   bytes.Buffer
}

// New returns an empty Recorder.
func New() *Recorder { return &Recorder{header: http.Header{}} }

// Header returns the headers to answer with.
func (r *Recorder) Header() http.Header { return r.header }

// WriteHeader keeps the first status, as a server does.
func (r *Recorder) WriteHeader(status int) {
	if r.Status == 0 {
		r.Status = status
	}
}

// Write appends to the body; a write before any status is a 200.
func (r *Recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.Body.Write(b)
}
