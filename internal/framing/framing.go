// Package framing holds the HTTP/1.1 message-framing rules both of
// Converge's listeners enforce before a route runs: the API's (Fiber on
// fasthttp, control/api) and a dispatch-only pod's (net/http, the callback
// routes and /metrics).
//
// Request smuggling lives in the gap between two parsers: a proxy in front
// reads where one request ends differently from the server behind it, and
// the bytes it took for a body the server takes for a second request, sent
// on someone else's connection. RFC 9112 §6.1 asks a server to refuse such a
// message and close the connection. The rules here leave one way to frame a
// request body, Content-Length, and refuse with 400 and a closed connection
// whatever a proxy could read another way:
//
//   - Transfer-Encoding, in any form or case, with or without
//     Content-Length (CL.TE, TE.CL, TE.TE). net/http drops both headers of a
//     CL+TE request before a handler sees it, so the one rule both listeners
//     can keep is to refuse Transfer-Encoding outright; every client of the
//     API and every provider SDK knows its body's length;
//   - Content-Length sent twice (fasthttp refuses it while parsing; net/http
//     refuses differing values and merges equal ones);
//   - on the API listener, whose raw header bytes are at hand: a header line
//     ending in a bare LF, a folded line (obs-fold), whitespace between a
//     field name and its colon;
//   - on the net/http listener, an HTTP/1.0 request has its connection
//     closed after the answer: net/http ignores Transfer-Encoding on HTTP/1.0
//     and deletes it unseen, and RFC 9112 §6.1 asks that such a message's
//     connection be closed.
//
// docs/operations.md ("Request smuggling") lists what each form gets.
package framing

import (
	"bytes"
	"net/http"

	"github.com/convergeplane/converge/internal/problem"
)

// TransferEncoding is the refusal of a request that carries
// Transfer-Encoding; withLength says it carries Content-Length as well.
func TransferEncoding(withLength bool) *problem.Problem {
	if withLength {
		return problem.New(http.StatusBadRequest, problem.TypeMalformed,
			"the request carries both Content-Length and Transfer-Encoding, which frame its body differently; send Content-Length only",
			problem.ProblemError{Location: "header.Transfer-Encoding", Message: "is not accepted: the body is framed by Content-Length"})
	}
	return problem.New(http.StatusBadRequest, problem.TypeMalformed,
		"Transfer-Encoding is not accepted; send the body with Content-Length",
		problem.ProblemError{Location: "header.Transfer-Encoding", Message: "is not accepted: the body is framed by Content-Length"})
}

// DuplicateContentLength is the refusal of a request that carries
// Content-Length more than once.
func DuplicateContentLength() *problem.Problem {
	return problem.New(http.StatusBadRequest, problem.TypeMalformed, "the request carries Content-Length more than once",
		problem.ProblemError{Location: "header.Content-Length", Message: "must be sent once"})
}

// Unreadable is the refusal of a request that is not valid HTTP/1.1.
func Unreadable() *problem.Problem {
	return problem.New(http.StatusBadRequest, problem.TypeMalformed, "the request is not valid HTTP/1.1")
}

// malformedHeader is the refusal of a header section with a badly formed
// line; why says how, never what the line held.
func malformedHeader(why string) *problem.Problem {
	return problem.New(http.StatusBadRequest, problem.TypeMalformed, "the request's headers are malformed: "+why,
		problem.ProblemError{Location: "header", Message: why})
}

// Check returns the refusal of a request whose raw header section (the
// header lines as received, after the request line, through the empty line
// that ends them) a proxy could frame differently, or nil. It is the
// API listener's check: fasthttp keeps these bytes and would accept each
// refused form.
func Check(raw []byte) *problem.Problem {
	var te, cl bool
	for line := range bytes.Lines(raw) {
		switch {
		case !bytes.HasSuffix(line, []byte("\r\n")):
			return malformedHeader("a line ends in a bare LF; lines end in CRLF")
		case len(line) == 2: // the empty line ending the section
			continue
		case line[0] == ' ' || line[0] == '\t':
			return malformedHeader("a line is folded onto the one before (obs-fold)")
		}
		name, _, ok := bytes.Cut(line, []byte(":"))
		switch {
		case !ok:
			return malformedHeader("a line has no colon")
		case bytes.ContainsAny(name, " \t"):
			return malformedHeader("whitespace between a field name and its colon")
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			te = true
		case bytes.EqualFold(name, []byte("Content-Length")):
			cl = true
		}
	}
	if te {
		return TransferEncoding(cl)
	}
	return nil
}

// Guard serves h on a net/http listener under these rules: a request with
// Transfer-Encoding is refused (net/http has already dropped any
// Content-Length beside it, so both read the same), and an HTTP/1.0
// request's connection is closed after its answer. A refusal closes the
// connection: net/http reads nothing more from it.
func Guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.ProtoAtLeast(1, 1) {
			w.Header().Set("Connection", "close")
		}
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
			TransferEncoding(false).Write(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
