// Package problem is the RFC 9457 problem document that every refusal of
// Converge's HTTP servers carries: its shape, the type URIs a client
// branches on, and a writer for net/http handlers.
//
// Two servers answer with it, and DESIGN.md keeps them from importing each
// other: the REST API (control/api, on Fiber) and the dispatch listener's
// callback routes (dispatch/callback, net/http), with the HTTP framing
// guard in front of both (internal/framing). The document and its types
// live here, below both, so that a client reads one set of types whichever
// listener refused it. docs/api.md ("Errors") lists the types.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ContentType is the media type of every error response.
const ContentType = "application/problem+json"

// Problem types. Each names one kind of failure a client may branch on.
const (
	TypeMalformed            = "urn:converge:problem:malformed-request"
	TypeInvalidDocument      = "urn:converge:problem:invalid-document"
	TypeInvalid              = "urn:converge:problem:invalid"
	TypeNotFound             = "urn:converge:problem:not-found"
	TypeConflict             = "urn:converge:problem:conflict"
	TypeVersionConflict      = "urn:converge:problem:version-conflict"
	TypePreconditionFailed   = "urn:converge:problem:precondition-failed"
	TypeGone                 = "urn:converge:problem:gone"
	TypeBreakingChange       = "urn:converge:problem:breaking-change"
	TypeUnauthorized         = "urn:converge:problem:unauthorized"
	TypeForbidden            = "urn:converge:problem:forbidden"
	TypeQuotaExceeded        = "urn:converge:problem:quota-exceeded"
	TypeTooLarge             = "urn:converge:problem:body-too-large"
	TypeHeadersTooLarge      = "urn:converge:problem:headers-too-large"
	TypeUnsupportedMediaType = "urn:converge:problem:unsupported-media-type"
	TypeNotAcceptable        = "urn:converge:problem:not-acceptable"
	TypeMethodNotAllowed     = "urn:converge:problem:method-not-allowed"
	TypeUnavailable          = "urn:converge:problem:unavailable"
	TypeTimeout              = "urn:converge:problem:timeout"
	TypeInternal             = "urn:converge:problem:internal"

	// The idempotency key refusals (control/api/idempotency.go).
	TypeIdempotencyKeyReused      = "urn:converge:problem:idempotency-key-reused"
	TypeIdempotencyKeyInUse       = "urn:converge:problem:idempotency-key-in-use"
	TypeIdempotencyOutcomeUnknown = "urn:converge:problem:idempotency-outcome-unknown"
)

// Problem is an RFC 9457 problem document, the body of every error. Errors
// lists each offending field; it is always present, possibly empty.
type Problem struct {
	Type     string         `json:"type" doc:"A URI naming the kind of problem, e.g. urn:converge:problem:invalid-document."`
	Title    string         `json:"title" doc:"A short summary of the problem type (the HTTP status text)."`
	Status   int            `json:"status" doc:"The HTTP status code."`
	Detail   string         `json:"detail" doc:"What went wrong this time."`
	Instance string         `json:"instance,omitempty" doc:"The request path."`
	Errors   []ProblemError `json:"errors" doc:"Each offending field."`

	// headers are sent with the problem (Retry-After on a 503).
	headers http.Header
}

// ProblemError is one offending field of a request.
type ProblemError struct {
	Location string `json:"location" doc:"Where: body.spec.replicas, path.kind, query.limit, header.Content-Type."`
	Message  string `json:"message" doc:"What is wrong with it."`
	Value    any    `json:"value,omitempty" doc:"The value sent, when short enough to echo."`
	// Pointer and Keyword are set for a JSON Schema violation: the RFC 6901
	// pointer into the request body and the failing schema keyword.
	Pointer string `json:"pointer,omitempty" doc:"For a JSON Schema violation: an RFC 6901 pointer into the request body."`
	Keyword string `json:"keyword,omitempty" doc:"For a JSON Schema violation: the schema keyword that failed."`
}

// New returns a problem of status and type typ; its title is the status
// text.
func New(status int, typ, detail string, errs ...ProblemError) *Problem {
	if errs == nil {
		errs = []ProblemError{}
	}
	return &Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail, Errors: errs}
}

// Error returns the detail.
func (p *Problem) Error() string { return p.Detail }

// GetHeaders returns the headers sent with the problem (it makes a Problem
// a huma.HeadersError).
func (p *Problem) GetHeaders() http.Header { return p.headers }

// GetStatus returns the status (it makes a Problem a huma.StatusError).
func (p *Problem) GetStatus() int { return p.Status }

// ContentType returns ContentType, whatever was negotiated (it makes huma
// send a Problem as application/problem+json).
func (p *Problem) ContentType(string) string { return ContentType }

// WithHeader sets a header sent with the problem (an ETag on a 412) and
// returns p.
func (p *Problem) WithHeader(key, value string) *Problem {
	if p.headers == nil {
		p.headers = http.Header{}
	}
	p.headers.Set(key, value)
	return p
}

// RetryAfter sets the problem's Retry-After header, in seconds, and
// returns p.
func (p *Problem) RetryAfter(secs int) *Problem {
	return p.WithHeader("Retry-After", strconv.Itoa(secs))
}

// Write answers a net/http request with p, its instance the request path
// unless p names one.
func (p *Problem) Write(w http.ResponseWriter, r *http.Request) {
	if p.Instance == "" {
		p.Instance = r.URL.Path
	}
	body, err := json.Marshal(p)
	if err != nil {
		// Only a Value that is not JSON can fail; the document goes without
		// the values then.
		q := *p
		q.Errors = make([]ProblemError, len(p.Errors))
		for i, e := range p.Errors {
			e.Value = nil
			q.Errors[i] = e
		}
		body, _ = json.Marshal(&q) // strings and ints only
	}
	h := w.Header()
	for k, vs := range p.headers {
		h[k] = vs
	}
	h.Set("Content-Type", ContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body) // the client is gone if this fails
}

// TypeFor is the type of a problem of status when nothing more specific is
// known (a router's refusal, an error a library raised). It never answers
// about:blank: a 4xx without a type of its own is malformed-request.
func TypeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return TypeMalformed
	case http.StatusUnprocessableEntity:
		return TypeInvalid
	case http.StatusNotFound:
		return TypeNotFound
	case http.StatusConflict:
		return TypeConflict
	case http.StatusPreconditionFailed:
		return TypePreconditionFailed
	case http.StatusGone:
		return TypeGone
	case http.StatusUnauthorized:
		return TypeUnauthorized
	case http.StatusForbidden:
		return TypeForbidden
	case http.StatusRequestEntityTooLarge:
		return TypeTooLarge
	case http.StatusRequestHeaderFieldsTooLarge:
		return TypeHeadersTooLarge
	case http.StatusUnsupportedMediaType:
		return TypeUnsupportedMediaType
	case http.StatusNotAcceptable:
		return TypeNotAcceptable
	case http.StatusMethodNotAllowed:
		return TypeMethodNotAllowed
	case http.StatusServiceUnavailable:
		return TypeUnavailable
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return TypeTimeout
	}
	if status >= 500 {
		return TypeInternal
	}
	return TypeMalformed
}

// Handler serves h, answering with a problem document wherever h answers an
// error in plain text through http.Error: the refusals http.ServeMux makes
// before any handler of ours runs (404 for no route; 405, with its Allow
// header, for a method the route does not take) and those of a library
// handler mounted on it. The detail is fixed by the status, never the
// plain text.
func Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&plainErrors{ResponseWriter: w, r: r}, r)
	})
}

// plainTextError is the Content-Type http.Error sets.
const plainTextError = "text/plain; charset=utf-8"

// plainErrors turns an http.Error answer into a problem document.
type plainErrors struct {
	http.ResponseWriter
	r       *http.Request
	started bool // a status was written
	problem bool // it was a problem: the plain text that follows is dropped
}

// WriteHeader writes a problem instead of a plain-text error status.
func (w *plainErrors) WriteHeader(code int) {
	switch {
	case w.started:
		return
	case code < http.StatusOK: // informational: the final status follows
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.started = true
	if code < http.StatusBadRequest || w.Header().Get("Content-Type") != plainTextError {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.problem = true
	w.Header().Del("X-Content-Type-Options")
	detail := http.StatusText(code)
	switch code {
	case http.StatusNotFound:
		detail = "no route " + w.r.Method + " " + w.r.URL.Path
	case http.StatusMethodNotAllowed:
		detail = "the method " + w.r.Method + " is not allowed on " + w.r.URL.Path + " (see Allow)"
	}
	New(code, TypeFor(code), detail).Write(w.ResponseWriter, w.r)
}

// Write drops the plain text of an error answered as a problem.
func (w *plainErrors) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if w.problem {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *plainErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }
