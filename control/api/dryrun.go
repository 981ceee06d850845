package api

import (
	"context"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/gofiber/fiber/v2"

	"github.com/convergeplane/converge/control/store"
)

// Dry runs (docs/api.md "Dry run"). Every write under Prefix (POST, PUT,
// PATCH, DELETE) takes ?dry_run=true: it runs exactly as without it, the
// same handler and store code, checks and answer, inside one database
// transaction that is rolled back (store.DryRun), so it changes nothing.
// Its answer, whatever its status, carries Dry-Run: true (a request refused
// before this middleware runs, by auth or checkQuery, does not). An
// Idempotency-Key sent with it is checked for form and otherwise ignored:
// a dry run is safe to repeat, its answer is not kept, and a later real
// request with the key runs as if the dry run had not been.

// The dry-run query parameter and answer header.
const (
	queryDryRun  = "dry_run"
	headerDryRun = "Dry-Run"
)

// dryRunParam documents ?dry_run on a write operation; the dryRun
// middleware reads it, not the handler.
func dryRunParam() *huma.Param {
	return &huma.Param{Name: queryDryRun, In: "query",
		Description: "true: validate and run this write exactly as without it, and answer as it would, " +
			"but change nothing (the database transaction is rolled back; the answer carries Dry-Run: true). " +
			"A generated signing secret is not shown, and the resource_version in the answer is never the object's.",
		Schema: &huma.Schema{Type: huma.TypeBoolean}}
}

// declaresDryRun reports whether the input type t (a struct, perhaps
// embedding others) reads ?dry_run itself: the dryRun middleware owns the
// parameter and takes it out of the query, so such an operation would
// never see it. An operation that answers differently on a dry run reads
// store.IsDryRun(ctx) instead.
func declaresDryRun(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("query"), ","); name == queryDryRun {
			return true
		}
		if f.Anonymous && declaresDryRun(f.Type) {
			return true
		}
	}
	return false
}

// documentDryRun documents ?dry_run on the write operation op, registered
// at op.Path, and the Dry-Run header on each of its answers.
func documentDryRun(oapi *huma.OpenAPI, op *huma.Operation) {
	item := oapi.Paths[op.Path]
	var doc *huma.Operation
	switch op.Method {
	case http.MethodPost:
		doc = item.Post
	case http.MethodPut:
		doc = item.Put
	case http.MethodPatch:
		doc = item.Patch
	case http.MethodDelete:
		doc = item.Delete
	}
	if doc == nil {
		panic("api: cannot document the dry run of " + op.Method + " " + op.Path)
	}
	for _, r := range doc.Responses {
		if r.Ref != "" {
			continue
		}
		if r.Headers == nil {
			r.Headers = map[string]*huma.Param{}
		}
		r.Headers[headerDryRun] = &huma.Param{Description: "true on the answer of a dry run (?dry_run=true): nothing was changed.",
			Schema: &huma.Schema{Type: huma.TypeBoolean}}
	}
}

// dryRun is the middleware of every write under Prefix: with
// ?dry_run=true it runs the rest of the request under store.DryRun. It
// takes the parameter out of the query, so the operation sees the request
// a real write is. A value that is not a boolean is a 400 naming it.
func (s *Server) dryRun(c *fiber.Ctx) error {
	if c.Method() == fiber.MethodGet || c.Method() == fiber.MethodHead {
		return c.Next()
	}
	args := c.Request().URI().QueryArgs()
	raw := args.Peek(queryDryRun)
	if raw == nil {
		return c.Next()
	}
	on, err := strconv.ParseBool(string(raw))
	if err != nil {
		return writeProblem(c, malformed("query."+queryDryRun, "must be true or false", string(raw)))
	}
	args.Del(queryDryRun)
	// fasthttp rebuilds the request URI from its query string once the
	// arguments are empty: set it from them.
	c.Request().URI().SetQueryStringBytes(args.QueryString())
	if !on {
		return c.Next()
	}
	c.Set(headerDryRun, "true")
	ran := false
	err = s.store.DryRun(c.UserContext(), func(ctx context.Context) error {
		ran = true
		c.SetUserContext(ctx)
		return c.Next()
	})
	if err != nil && !ran {
		// The transaction could not begin (the database is unreachable).
		return writeProblem(c, s.problemFor(c.UserContext(), err, problemOpts{}))
	}
	return err
}

// isDryRun reports whether the request runs as a dry run.
func isDryRun(c *fiber.Ctx) bool { return store.IsDryRun(c.UserContext()) }
