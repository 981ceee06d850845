package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/pgrun"
	"github.com/convergeplane/converge/internal/problem"
)

// ProblemContentType is the media type of every error response.
const ProblemContentType = problem.ContentType

// Problem types (see package problem). Each names one kind of failure a
// client may branch on; docs/api.md describes them.
const (
	typeMalformed          = problem.TypeMalformed
	typeInvalidDocument    = problem.TypeInvalidDocument
	typeInvalid            = problem.TypeInvalid
	typeNotFound           = problem.TypeNotFound
	typeConflict           = problem.TypeConflict
	typeVersionConflict    = problem.TypeVersionConflict
	typePreconditionFailed = problem.TypePreconditionFailed
	// The idempotency key refusals (idempotency.go).
	typeIdempotencyKeyReused      = problem.TypeIdempotencyKeyReused
	typeIdempotencyKeyInUse       = problem.TypeIdempotencyKeyInUse
	typeIdempotencyOutcomeUnknown = problem.TypeIdempotencyOutcomeUnknown
	typeBreakingChange            = problem.TypeBreakingChange
	typeUnauthorized              = problem.TypeUnauthorized
	typeForbidden                 = problem.TypeForbidden
	typeQuotaExceeded             = problem.TypeQuotaExceeded
	typeTooLarge                  = problem.TypeTooLarge
	typeHeadersTooLarge           = problem.TypeHeadersTooLarge
	typeUnsupportedMediaType      = problem.TypeUnsupportedMediaType
	typeUnavailable               = problem.TypeUnavailable
	typeTimeout                   = problem.TypeTimeout
	typeInternal                  = problem.TypeInternal
)

// Problem is an RFC 9457 problem document, the body of every error: the
// one the dispatch listener's callback routes answer with too.
type Problem = problem.Problem

// ProblemError is one offending field of a request.
type ProblemError = problem.ProblemError

// Retry-After hints, in seconds, on the 503 problems: a database that does
// not answer at all (down, restarting) is given longer than a busy one.
const (
	RetryAfterUnreachable = 5
	RetryAfterBusy        = 1
)

// unavailableProblem is the answer when the database cannot be reached.
func unavailableProblem() *Problem {
	return newProblem(http.StatusServiceUnavailable, typeUnavailable,
		"the database is unreachable; retry the request later").RetryAfter(RetryAfterUnreachable)
}

func newProblem(status int, typ, detail string, errs ...ProblemError) *Problem {
	return problem.New(status, typ, detail, errs...)
}

// writeProblem answers a Fiber request with p.
func writeProblem(c *fiber.Ctx, p *Problem) error {
	if p.Instance == "" {
		p.Instance = c.Path()
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode problem: %w", err)
	}
	for k, vs := range p.GetHeaders() {
		for _, v := range vs {
			c.Set(k, v)
		}
	}
	c.Set(fiber.HeaderContentType, ProblemContentType)
	return c.Status(p.Status).Send(b)
}

// problemTransformer turns the errors huma raises itself (a bad path or
// query parameter, a missing body) into Problems, so every error has one
// shape, and stamps each Problem with the request path. It is a per-API
// transformer: huma's global NewError is left alone.
func problemTransformer(ctx huma.Context, _ string, v any) (any, error) {
	if p, ok := v.(*Problem); ok {
		if p.Instance == "" {
			p.Instance = ctx.URL().Path
		}
		return p, nil
	}
	em, ok := v.(*huma.ErrorModel)
	if !ok {
		return v, nil
	}
	p := newProblem(em.Status, problem.TypeFor(em.Status), em.Detail)
	p.Instance = ctx.URL().Path
	if em.Title != "" {
		p.Title = em.Title
	}
	for _, d := range em.Errors {
		if d == nil {
			continue
		}
		p.Errors = append(p.Errors, ProblemError{Location: d.Location, Message: d.Message, Value: d.Value})
	}
	if em.Status == http.StatusUnprocessableEntity && p.Detail == "validation failed" && len(p.Errors) > 0 {
		p.Detail = "invalid request: " + p.Errors[0].Location + ": " + p.Errors[0].Message
	}
	return p, nil
}

// fiberError renders the errors Fiber raises outside huma: no such route,
// a body over the limit (fasthttp refuses it before a handler runs), a
// panic, and anything a middleware returns.
func (s *Server) fiberError(c *fiber.Ctx, err error) error {
	var p *Problem
	if errors.As(err, &p) {
		return writeProblem(c, p)
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		switch fe.Code {
		case http.StatusRequestEntityTooLarge:
			p = s.bodyTooLarge()
		case http.StatusNotFound:
			p = newProblem(fe.Code, typeNotFound, fmt.Sprintf("no route %s %s", c.Method(), c.Path()))
		default:
			detail := fe.Message
			if fe.Code >= 500 {
				s.log.Error("api: request failed", "method", c.Method(), "path", c.Path(), "err", err)
				detail = http.StatusText(fe.Code)
			}
			p = newProblem(fe.Code, problem.TypeFor(fe.Code), detail)
		}
		return writeProblem(c, p)
	}
	if pgrun.Unreachable(err) {
		s.log.Warn("api: database unreachable", "method", c.Method(), "path", c.Path(), "err", err)
		return writeProblem(c, unavailableProblem())
	}
	s.log.Error("api: request failed", "method", c.Method(), "path", c.Path(), "err", err)
	return writeProblem(c, newProblem(http.StatusInternalServerError, typeInternal, "internal error"))
}

// bodyTooLarge is the answer to a body over BodyLimit, which fasthttp
// refuses before a handler runs.
func (s *Server) bodyTooLarge() *Problem {
	return newProblem(http.StatusRequestEntityTooLarge, typeTooLarge, fmt.Sprintf("the request body is larger than the %d-byte limit", s.cfg.BodyLimit),
		ProblemError{Location: "body", Message: fmt.Sprintf("must be at most %d bytes", s.cfg.BodyLimit)})
}

// in is where the fields a store error names were sent: "body", "query" or
// "path".
type in string

// inPart converts a caller's location word; anything unknown means the body.
func inPart(s string) in {
	switch s {
	case "path", "query", "header":
		return in(s)
	}
	return "body"
}

// locate prefixes a store field location with where it was sent.
func (w in) locate(field string) string {
	if field == "" {
		return string(w)
	}
	return string(w) + "." + field
}

// problemOpts carries request context for rendering a store error.
type problemOpts struct {
	in in
	// value returns the value sent for a field, to echo it; may be nil.
	value func(field string) any
	// doc is the document a DocumentError is about, to echo offending
	// values; may be nil.
	doc json.RawMessage
	// version is where a conditional write's condition was sent, for a
	// *store.PreconditionError: "header" (412) or "body" (409).
	version in
}

// problemFor maps an error from the store to a Problem. Unknown errors are
// logged and answered 500 without their text: it may carry SQL.
func (s *Server) problemFor(ctx context.Context, err error, o problemOpts) *Problem {
	if o.in == "" {
		o.in = "body"
	}
	echo := func(field string) any {
		if o.value == nil {
			return nil
		}
		return o.value(field)
	}
	var (
		p   *Problem
		de  *store.DocumentError
		be  *store.BreakingChangeError
		ce  *store.ConflictError
		ie  *store.InvalidError
		nfe *store.NotFoundError
		pce *store.PreconditionError
		qe  *store.QuotaError
		pe  *pgconn.PgError
	)
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &pce):
		return versionProblem(pce, o.version)
	case errors.As(err, &qe):
		return quotaProblem(qe)
	case errors.As(err, &de):
		return documentProblem(de, o)
	case errors.As(err, &be):
		p := newProblem(http.StatusConflict, typeBreakingChange, be.Unwrap().(*store.ConflictError).Message)
		for _, c := range be.Changes {
			loc := o.in.locate(c.Field)
			if c.Path != "" {
				loc += "." + c.Path
			}
			p.Errors = append(p.Errors, ProblemError{Location: loc, Message: c.Message})
		}
		return p
	case errors.As(err, &ce):
		p := newProblem(http.StatusConflict, typeConflict, ce.Message)
		for _, d := range ce.Details {
			p.Errors = append(p.Errors, ProblemError{Location: string(o.in), Message: d})
		}
		return p
	case errors.As(err, &ie):
		loc := o.in.locate(ie.Location)
		if loc == "query.cursor" {
			return cursorProblem(ie.Message, echo(ie.Location))
		}
		return newProblem(http.StatusUnprocessableEntity, typeInvalid, loc+": "+ie.Message,
			ProblemError{Location: loc, Message: ie.Message, Value: echo(ie.Location)})
	case errors.As(err, &nfe):
		p := newProblem(http.StatusNotFound, typeNotFound, nfe.Message)
		if nfe.Location == "namespace" {
			// Every operation names its namespace in the query.
			return namespaceNotFound(nfe.Message, echo(nfe.Location))
		}
		if nfe.Location != "" {
			p.Errors = append(p.Errors, ProblemError{Location: o.in.locate(nfe.Location), Message: nfe.Message, Value: echo(nfe.Location)})
		}
		return p
	case errors.Is(err, store.ErrNotFound):
		return newProblem(http.StatusNotFound, typeNotFound, "not found")
	case pgrun.Unreachable(err):
		// Before the deadline check: a connect that timed out is the
		// database not answering, not a slow request.
		s.log.Warn("api: database unreachable", "err", err)
		return unavailableProblem()
	case errors.Is(err, context.DeadlineExceeded):
		s.log.Warn("api: request timed out", "err", err)
		return newProblem(http.StatusServiceUnavailable, typeTimeout, "the request did not finish in time; retry it").RetryAfter(RetryAfterBusy)
	case errors.As(err, &pe):
		// The store maps the violations it expects; these are backstops.
		// The SQLSTATE decides the status, and no SQL text leaves.
		switch pe.Code {
		case "23505":
			return newProblem(http.StatusConflict, typeConflict, "the object conflicts with one that exists")
		case "23503":
			return newProblem(http.StatusConflict, typeConflict, "the object references, or is referenced by, another object")
		case "23514", "23502":
			return newProblem(http.StatusUnprocessableEntity, typeInvalid, "the object breaks a rule enforced by the database")
		case "22P02", "22P05", "22001", "22003", "22021":
			return newProblem(http.StatusBadRequest, typeMalformed, "a value cannot be stored as sent")
		case "40001", "40P01", "55P03", "57014", "53300":
			s.log.Warn("api: database busy", "code", pe.Code, "err", err)
			return newProblem(http.StatusServiceUnavailable, typeUnavailable, "the database is busy; retry the request").RetryAfter(RetryAfterBusy)
		}
	}
	s.log.Error("api: request failed", "err", err)
	return newProblem(http.StatusInternalServerError, typeInternal, "internal error")
}

// documentProblem renders a schema violation: one error per violation, at
// the field's location in the body, with the pointer and keyword.
func documentProblem(de *store.DocumentError, o problemOpts) *Problem {
	var doc any
	if len(o.doc) > 0 {
		_ = json.Unmarshal(o.doc, &doc) // best effort: only used to echo values
	}
	p := newProblem(http.StatusBadRequest, typeInvalidDocument,
		fmt.Sprintf("%s does not match the %s schema of %s/%d", de.Location, de.Location, de.Kind, de.KindVersion))
	for _, v := range de.Violations {
		loc, val := pointerLocation(o.in.locate(de.Location), v.Pointer, doc)
		pe := ProblemError{Location: loc, Message: v.Message, Pointer: "/" + de.Location + v.Pointer, Keyword: v.Keyword}
		if v.Keyword != "required" && v.Keyword != "dependentRequired" {
			pe.Value = shortValue(val)
		}
		p.Errors = append(p.Errors, pe)
	}
	if len(p.Errors) > 0 {
		first := p.Errors[0]
		p.Detail += ": " + first.Location + ": " + first.Keyword + ": " + first.Message
		if len(p.Errors) > 1 {
			p.Detail += fmt.Sprintf(" (and %d more)", len(p.Errors)-1)
		}
	}
	return p
}

// pointerLocation turns an RFC 6901 pointer into the dotted location style
// of the other errors (body.spec.items[2].name) and finds the value there.
func pointerLocation(base, pointer string, doc any) (string, any) {
	if pointer == "" {
		return base, doc
	}
	var b strings.Builder
	b.WriteString(base)
	cur := doc
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v := cur.(type) {
		case []any:
			b.WriteString("[" + tok + "]")
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(v) {
				cur = v[i]
			} else {
				cur = nil
			}
		case map[string]any:
			b.WriteString("." + tok)
			cur = v[tok]
		default:
			b.WriteString("." + tok)
			cur = nil
		}
	}
	return b.String(), cur
}

// shortValue echoes scalars and small composites; large ones are omitted
// rather than mirrored back at the client.
func shortValue(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case map[string]any, []any:
		b, err := json.Marshal(x)
		if err != nil || len(b) > 256 {
			return nil
		}
	case string:
		if len(x) > 256 {
			return nil
		}
	}
	return v
}
