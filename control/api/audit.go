package api

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/store"
)

// The audit trail (docs/api.md "Audit trail"). auditRequests wraps every
// route under Prefix, the auth middleware included, and records each
// request that is not a read (GET, HEAD, OPTIONS) once it is answered,
// whatever the answer: a success, a refusal (401, 403), a bad request, a
// failure, a panic. The row is written after the request, in a statement of
// its own on the pool, never in the request's transaction: a dry run, a
// refusal and a failure roll back or write nothing, and their row must
// stay; a success has committed by then. The answer waits for the row, so
// a client that saw an answer knows its request was recorded unless the
// write failed, which is logged (with the whole entry) and counted
// (converge_audit_write_failures_total); it never changes the answer.
//
// What a request addressed is read from its path (objectOf) and its
// namespace query parameter, so a route added later is recorded without
// changes; a handler that knows more (the name in an applied body, the
// versions before and after a write) adds it with noteObject and
// noteVersions.

// headerRequestID carries a request's id: the client's when it sends a
// usable one (requestID), else one the server makes; every answer under
// Prefix echoes it, and the audit trail records it.
const headerRequestID = "X-Request-Id"

// auditWriteTimeout bounds the write of one audit row, which runs after
// the request under a context of its own (the request's may have expired).
const auditWriteTimeout = 5 * time.Second

// subjectUnauthenticated is the subject recorded for a request refused
// before its caller was known (a 401).
const subjectUnauthenticated = "unauthenticated"

// auditNote is what a handler adds to its request's audit row.
type auditNote struct {
	kind, name    string
	before, after int64
}

type auditNoteKey struct{}

// noteObject names the object the request addresses when its path does
// not (an apply names it in its body). Outside an audited request it does
// nothing.
func noteObject(ctx context.Context, kind, name string) {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok {
		n.kind, n.name = kind, name
	}
}

// noteVersions records the object's resource_version before and after the
// write (0: none, as before a create). Outside an audited request it does
// nothing.
func noteVersions(ctx context.Context, before, after int64) {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok {
		n.before, n.after = before, after
	}
}

// auditLog records requests through the store.
type auditLog struct {
	store    *store.Store
	log      *slog.Logger
	onError  fiber.ErrorHandler
	failures prometheus.Counter
}

func newAuditLog(st *store.Store, log *slog.Logger, onError fiber.ErrorHandler, reg prometheus.Registerer) (*auditLog, error) {
	a := &auditLog{store: st, log: log, onError: onError, failures: prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "converge", Subsystem: "audit", Name: "write_failures_total",
		Help: "Audit rows the API could not write (the request was answered all the same; the entry is logged).",
	})}
	if reg != nil {
		if err := reg.Register(a.failures); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// requestID is the id of a request that sent header: header itself when it
// is 1 to 128 characters of letters, digits and . _ : / + = -, else a new
// UUID (an id that could not be logged safely is replaced, not refused).
func requestID(header string) string {
	if len(header) == 0 || len(header) > 128 {
		return uuid.NewString()
	}
	for _, r := range header {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("._:/+=-", r) {
			return uuid.NewString()
		}
	}
	return header
}

// middleware gives every request its id and records every request that is
// not a read (see the top of this file).
func (a *auditLog) middleware(c *fiber.Ctx) error {
	id := requestID(c.Get(headerRequestID))
	c.Set(headerRequestID, id)
	if isRead(c.Method()) {
		return c.Next()
	}
	// Read before the request runs: the dryRun middleware takes ?dry_run
	// out of the query, and the request's own context may be a dry run's.
	base := c.UserContext()
	note := &auditNote{}
	c.SetUserContext(context.WithValue(base, auditNoteKey{}, note))
	args := c.Request().URI().QueryArgs()
	dry, _ := strconv.ParseBool(string(args.Peek(queryDryRun))) // a bad value is refused, recorded as not a dry run
	e := store.AuditEntry{
		Method:     utils.CopyString(c.Method()),
		Path:       utils.CopyString(c.Path()),
		Namespace:  cmp.Or(string(args.Peek("namespace")), "default"),
		RemoteAddr: utils.CopyString(c.IP()),
		RequestID:  id,
		DryRun:     dry,
	}
	answered := false
	defer func() {
		if answered {
			return
		}
		// A panic: the recover middleware outside answers 500.
		r := recover()
		a.record(base, c, &e, note, http.StatusInternalServerError)
		panic(r)
	}()
	if err := c.Next(); err != nil {
		if err := a.onError(c, err); err != nil {
			_ = c.SendStatus(fiber.StatusInternalServerError) // as Fiber answers an error handler that fails
		}
	}
	answered = true
	a.record(base, c, &e, note, c.Response().StatusCode())
	return nil
}

// record completes e from the answered request and writes it under a
// context of its own, derived from base (the request's, before any dry
// run).
func (a *auditLog) record(base context.Context, c *fiber.Ctx, e *store.AuditEntry, note *auditNote, status int) {
	ctx := c.UserContext()
	if p, ok := ctx.Value(principalKey{}).(Principal); ok {
		e.Subject, e.Groups, e.TokenName = p.Subject, p.Groups, p.TokenName
	} else {
		e.Subject = subjectUnauthenticated
	}
	e.Route = routeLabel(c.Route())
	e.ObjectKind, e.ObjectName = objectOf(e.Path)
	if note.kind != "" {
		e.ObjectKind, e.ObjectName = note.kind, note.name
	}
	if note.before > 0 {
		e.VersionBefore = &note.before
	}
	// A dry run's answer carries a version the object never had.
	if note.after > 0 && status < 400 && !e.DryRun {
		e.VersionAfter = &note.after
	}
	e.Status = status
	e.Outcome = store.OutcomeOf(status)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(base), auditWriteTimeout)
	defer cancel()
	if _, err := a.store.RecordAudit(wctx, *e); err != nil {
		a.failures.Inc()
		a.log.Error("audit: cannot record a request", "err", err, "request_id", e.RequestID, "subject", e.Subject,
			"token_name", e.TokenName, "method", e.Method, "path", e.Path, "namespace", e.Namespace,
			"object_kind", e.ObjectKind, "object_name", e.ObjectName, "status", e.Status, "dry_run", e.DryRun,
			"remote_addr", e.RemoteAddr)
	}
}

// objectOf reads what a request addressed from its path: under
// /resources/{kind}/{name}..., the resource's kind and name; under any
// other /{collection}/{name}..., the collection (with any :action cut off)
// and the name; a collection alone is (collection, "").
func objectOf(path string) (kind, name string) {
	rest, ok := strings.CutPrefix(path, Prefix+"/")
	if !ok || rest == "" {
		return "", ""
	}
	seg := strings.Split(rest, "/")
	coll, _, _ := strings.Cut(seg[0], ":")
	unescape := func(s string) string {
		if u, err := url.PathUnescape(s); err == nil {
			return u
		}
		return s
	}
	switch {
	case coll == "resources" && len(seg) >= 3 && seg[0] == coll:
		return unescape(seg[1]), unescape(seg[2])
	case len(seg) >= 2 && seg[1] != "":
		return coll, unescape(seg[1])
	}
	return coll, ""
}

// attributeWrites marks the context of every request that is not a read
// with its caller's subject (store.WithActor): the events and spec
// revisions it writes name their author. It runs after the auth middleware.
func attributeWrites(c *fiber.Ctx) error {
	if !isRead(c.Method()) {
		c.SetUserContext(store.WithActor(c.UserContext(), PrincipalFrom(c.UserContext()).Subject))
	}
	return c.Next()
}

// AuditList is one page of the audit trail: GET /audit.
type AuditList struct {
	Items []store.AuditEntry `json:"items"`
	// NextCursor continues the listing; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty" doc:"Pass as ?cursor= for the next (older) page; absent on the last page."`
}

type listAuditInput struct {
	Namespace string    `query:"namespace" default:"default" doc:"Only requests made in this namespace (the namespace query parameter they sent, default when none); * for every namespace."`
	Kind      string    `query:"kind" doc:"Only requests that addressed an object of this kind: a resource's kind, or a collection (endpoints, providerconfigs, kinds, ...)."`
	Name      string    `query:"name" doc:"Only requests that addressed an object of this name (with kind or alone)."`
	Subject   string    `query:"subject" doc:"Only this caller's requests (token:admin-0, an OIDC subject, anonymous, unauthenticated)."`
	Outcome   string    `query:"outcome" enum:"ok,refused,error" doc:"Only requests with this outcome."`
	Since     time.Time `query:"since" doc:"Only requests at or after this RFC 3339 time."`
	Until     time.Time `query:"until" doc:"Only requests before this RFC 3339 time; after since when both are given."`
	Limit     int       `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"Page size."`
	Cursor    string    `query:"cursor" doc:"The next_cursor of the previous page."`
}

func (s *Server) registerAudit() {
	register(s, huma.Operation{
		OperationID: "list-audit", Method: http.MethodGet, Path: "/audit", Tags: []string{"Audit"},
		Summary: "List audited requests",
		Description: "The audit trail, newest first with a keyset cursor: every request under /api/v1 that is not a read " +
			"(GET, HEAD, OPTIONS), whatever its outcome, refusals included: who (subject, groups, token name), what (method, route, " +
			"path, namespace, object, resource_version before and after), when, from where, the request id, the status and outcome, " +
			"and whether it was a dry run. No route changes it; entries older than the server's AUDIT_RETENTION are pruned. " +
			"Filters: namespace (* for all), kind and name of the object, subject, outcome, and the window since..until.",
		Errors: []int{422},
	}, nil, s.listAudit)
}

func (s *Server) listAudit(ctx context.Context, in *listAuditInput) (*pageOutput[AuditList], error) {
	page, err := s.store.ListAudit(ctx, store.AuditFilter{Namespace: in.Namespace, ObjectKind: in.Kind, ObjectName: in.Name,
		Subject: in.Subject, Outcome: in.Outcome, Since: in.Since, Until: in.Until, Limit: in.Limit, Cursor: in.Cursor})
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "query", value: func(f string) any {
			switch f {
			case "cursor":
				return in.Cursor
			case "outcome":
				return in.Outcome
			case "until":
				return in.Until
			}
			return nil
		}})
	}
	return &pageOutput[AuditList]{NextCursor: page.NextCursor, Body: AuditList{Items: page.Items, NextCursor: page.NextCursor}}, nil
}
