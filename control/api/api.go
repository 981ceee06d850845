// Package api serves Converge's REST API under /api/v1: kind manifests and
// their operational config, resources, provider configs and reactor
// bindings, plus /livez, /readyz, /openapi.json and /docs.
//
// It is Fiber with huma on top. huma routes each operation, parses path and
// query parameters and generates the OpenAPI 3.1 document; the handlers
// decode request bodies themselves (each operation takes its raw body) so
// that every status code is this package's decision: a body that is not
// JSON is 400, a body that breaks a rule is 422, a spec or config that
// breaks its kind's JSON Schema is 400 with the pointer and keyword. Every
// error, including Fiber's own (unknown route, body over the limit, panic),
// is an RFC 9457 application/problem+json document; see problem.go.
//
// Kinds are data applied at runtime, so the OpenAPI document is too: the
// spec, status and config schema of every published kind version appear as
// components as soon as the manifest is applied (see openapi.go).
//
// Only the store speaks SQL. Each write is one store call, one transaction,
// so bad input changes nothing.
package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humafiber"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/framing"
)

// Prefix is the path every REST route lives under.
const Prefix = "/api/v1"

// Config configures the API. The zero value takes every default and leaves
// the API open (no tokens), which suits development only.
type Config struct {
	// BodyLimit caps a request body in bytes; a larger one is refused with
	// 413 before it is read in full. Defaults to 4 MiB.
	BodyLimit int
	// BatchMaxItems caps the items of one POST /resources:batch; more is
	// refused with 413 naming body.items. Defaults to 5,000.
	BatchMaxItems int
	// ListPageBytes ends a page of a list of large objects (resources,
	// children, provider configs, operations, spec revisions) early, with a next_cursor, before the item that
	// would take the bytes read for it past ListPageBytes; a page always
	// holds at least one item. It bounds the memory one list request
	// takes. Defaults to store.ListBytesDefault (4 MiB).
	ListPageBytes int
	// Version is the build version reported by GET /api/v1/version and in
	// the OpenAPI document. Defaults to "dev".
	Version string
	// ReadTokens are bearer tokens that may call the read-only (GET, HEAD)
	// routes under /api/v1.
	ReadTokens []string
	// AdminTokens are bearer tokens that may call every route. When neither
	// ReadTokens nor AdminTokens nor OIDC nor an Authenticator is set, the
	// API is open. /livez, /readyz, /openapi.json, /docs and
	// /api/v1/auth/config never need a token; /metrics needs a read one.
	AdminTokens []string
	// OIDC, when set, also accepts bearer tokens its issuer signed (see
	// OIDCConfig): a token shaped like a JWT is verified as one, any other
	// is compared with the static tokens. Its callers may do what their
	// role bindings allow (docs/api.md, "Roles and role bindings").
	OIDC *OIDCConfig
	// Authenticator, when set, verifies the bearer tokens that are neither
	// static nor OIDC ones (another kind of sign-in); its callers, too, may
	// do what their role bindings allow.
	Authenticator Authenticator
	// RequestTimeout bounds the work of one request (its database calls).
	// Defaults to 30 seconds.
	RequestTimeout time.Duration
	// ReadyTimeout bounds the checks of /readyz. Defaults to 2 seconds.
	ReadyTimeout time.Duration
	// HeaderTimeout bounds the wait for a request's headers, from the
	// connection's first byte (or, on a kept-alive connection, the next
	// request's): a connection that sends none, or never finishes them, is
	// closed. Defaults to 10 seconds.
	HeaderTimeout time.Duration
	// ReadTimeout bounds reading a request's body once its headers are in.
	// Defaults to 60 seconds (a 4 MiB body at 1 Mbit/s takes 34).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response. The change stream's deadline
	// moves on with each event it writes, so an open stream is never cut
	// while its client reads. Defaults to 60 seconds.
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request. Defaults to 90 seconds: longer than a load balancer's
	// usual idle timeout (AWS ALB: 60 s), so the balancer, not the server,
	// closes an idle connection and never sends a request on one being
	// closed.
	IdleTimeout time.Duration
	// ReadyChecks are the checks of /readyz, run in order. Nil checks that
	// the database answers (DatabaseCheck) and nothing else.
	ReadyChecks []ReadyCheck
	// Endpoints enables the provider endpoint routes; nil leaves them out.
	Endpoints *EndpointsConfig
	// Metrics, when set, is served at GET /metrics (Prometheus). When API
	// tokens are configured it needs a read or admin token, like the read
	// routes; without tokens it is open like the rest of the API.
	Metrics http.Handler
	// MetricsRegistry, when set, receives the request metrics
	// (converge_api_requests_total, converge_api_request_duration_seconds;
	// see metrics.go). Nil records none.
	MetricsRegistry prometheus.Registerer
	// PairStatus, where a dispatcher runs in this process, says whether a
	// (kind, kind_version) has a ready endpoint for a namespace's tasks and
	// if not why; the resource detail shows it for a task that waits. Nil
	// omits it.
	PairStatus func(namespace, kind string, version int) (ready bool, reason string)
	// Console, when set, is the web console served at / and its client-side
	// routes (ConsolePages): index.html at its root, hashed files under
	// assets/ (see package ui). Nil serves no console.
	Console fs.FS
	// Events, when set, serves the console's change stream at GET
	// /api/v1/events/stream (a read route). Nil leaves the route out.
	Events *EventHub
	// IdempotencyRetention is how long the answer of a POST sent with an
	// Idempotency-Key is kept for its retries. Defaults to 24 hours.
	IdempotencyRetention time.Duration
	// Tracer, when set, records a server span per request (trace.go) and
	// stores a write's trace context with the work it schedules, so its
	// deliveries join the request's trace. Nil traces nothing and stores
	// nothing.
	Tracer trace.TracerProvider
}

// The Config defaults.
const (
	BodyLimitDefault      = 4 << 20
	BatchMaxItemsDefault  = 5000
	VersionDefault        = "dev"
	RequestTimeoutDefault = 30 * time.Second
	ReadyTimeoutDefault   = 2 * time.Second
	HeaderTimeoutDefault  = 10 * time.Second
	ReadTimeoutDefault    = 60 * time.Second
	WriteTimeoutDefault   = 60 * time.Second
	IdleTimeoutDefault    = 90 * time.Second
	// IdempotencyRetentionDefault is IdempotencyRetention's default.
	IdempotencyRetentionDefault = 24 * time.Hour
)

// MaxHeaderBytes caps a request's line and headers together (it is
// fasthttp's read buffer): a larger request is refused with 431 before any
// route runs. It is sized so that every documented limit is reachable: a
// MaxSelectorBytes label_selector with every byte percent-encoded takes
// 12 KiB of the request line and leaves 20 KiB for the other parameters
// and the headers, a long bearer token (an OIDC JWT) included. A connection
// holds a read buffer of this size only while a request arrives on it; an
// idle one releases it, so the size costs only the connections mid-request.
const MaxHeaderBytes = 32 << 10

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.BodyLimit = cmp.Or(c.BodyLimit, BodyLimitDefault)
	c.BatchMaxItems = cmp.Or(c.BatchMaxItems, BatchMaxItemsDefault)
	c.ListPageBytes = cmp.Or(c.ListPageBytes, store.ListBytesDefault)
	c.Version = cmp.Or(c.Version, VersionDefault)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, RequestTimeoutDefault)
	c.ReadyTimeout = cmp.Or(c.ReadyTimeout, ReadyTimeoutDefault)
	c.HeaderTimeout = cmp.Or(c.HeaderTimeout, HeaderTimeoutDefault)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, ReadTimeoutDefault)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, IdleTimeoutDefault)
	c.IdempotencyRetention = cmp.Or(c.IdempotencyRetention, IdempotencyRetentionDefault)
	return c
}

func (c Config) validate() error {
	switch {
	case c.BodyLimit < 0:
		return fmt.Errorf("api: BodyLimit must not be negative (got %d)", c.BodyLimit)
	case c.BatchMaxItems < 0:
		return fmt.Errorf("api: BatchMaxItems must not be negative (got %d)", c.BatchMaxItems)
	case c.ListPageBytes < 0:
		return fmt.Errorf("api: ListPageBytes must not be negative (got %d)", c.ListPageBytes)
	case c.RequestTimeout < 0:
		return fmt.Errorf("api: RequestTimeout must not be negative (got %s)", c.RequestTimeout)
	case c.ReadyTimeout < 0:
		return fmt.Errorf("api: ReadyTimeout must not be negative (got %s)", c.ReadyTimeout)
	case c.HeaderTimeout < 0 || c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0:
		return fmt.Errorf("api: HeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout must not be negative (got %s, %s, %s, %s)",
			c.HeaderTimeout, c.ReadTimeout, c.WriteTimeout, c.IdleTimeout)
	case c.IdempotencyRetention < 0:
		return fmt.Errorf("api: IdempotencyRetention must not be negative (got %s)", c.IdempotencyRetention)
	}
	if e := c.Endpoints; e != nil && (e.Box == nil || e.ValidateURL == nil) {
		return errNoEndpoints
	}
	for i, t := range c.ReadTokens {
		if t == "" {
			return fmt.Errorf("api: ReadTokens[%d] is empty", i)
		}
	}
	for i, t := range c.AdminTokens {
		if t == "" {
			return fmt.Errorf("api: AdminTokens[%d] is empty", i)
		}
	}
	if c.OIDC != nil {
		return c.OIDC.validate()
	}
	return nil
}

// Server is the REST API over one store and kind cache. Mount App on a
// listener; register further operations on API (they get the same auth,
// limits and problem responses).
type Server struct {
	cfg   Config
	store *store.Store
	kinds *store.KindCache
	log   *slog.Logger
	app   *fiber.App
	api   huma.API
	auth  *auth
	docs  *openAPIDoc
	// perms is the route-by-role table (rbac.go); bindings caches the role
	// bindings it is checked against.
	perms    map[string]permission
	bindings *bindingCache
}

// New builds the API. st is the store every handler writes through; kinds
// is the process's kind cache (the one installed as st's spec validator),
// refreshed synchronously after each manifest write and used to publish
// kind schemas in the OpenAPI document. log receives server-side failures;
// nil discards them.
func New(cfg Config, st *store.Store, kinds *store.KindCache, log *slog.Logger) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if st == nil || kinds == nil {
		return nil, errors.New("api: a store and a kind cache are required")
	}
	cfg = cfg.WithDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, store: st, kinds: kinds, log: log, auth: newAuth(cfg.ReadTokens, cfg.AdminTokens, cfg.OIDC, cfg.Authenticator),
		perms: permissions(), bindings: &bindingCache{st: st, ttl: bindingCacheTTL, timeout: cfg.RequestTimeout}}

	s.app = fiber.New(fiber.Config{
		AppName:        "converge",
		BodyLimit:      cfg.BodyLimit,
		ReadBufferSize: MaxHeaderBytes,
		// A connection holds its read buffer only while it has bytes to read:
		// an idle keep-alive connection does not keep MaxHeaderBytes.
		ReduceMemoryUsage:     true,
		ErrorHandler:          s.fiberError,
		DisableStartupMessage: true,
		// fasthttp's read timeout runs from a request's first byte, over
		// its headers; bodyDeadline gives the body its own.
		ReadTimeout:  cfg.HeaderTimeout,
		WriteTimeout: cfg.WriteTimeout,
		IdleTimeout:  cfg.IdleTimeout,
	})
	s.app.Server().HeaderReceived = s.bodyDeadline
	s.app.Server().ConnState = s.firstByteDeadline
	s.guardRequests()
	s.answerUnreadable()
	if cfg.MetricsRegistry != nil {
		m, err := newRequestMetrics(cfg.MetricsRegistry)
		if err != nil {
			return nil, err
		}
		// Outermost, so it sees a panic's 500 and every refusal.
		s.app.Use(m.middleware(s.fiberError))
	}
	if cfg.Tracer != nil {
		// The API's routes only: a pod's callback receiver, served beside
		// them, traces its requests itself (package callback).
		s.app.Use(Prefix, tracing(cfg.Tracer, s.fiberError))
	}
	s.app.Use(recover.New(recover.Config{EnableStackTrace: true, StackTraceHandler: s.logPanic}))
	s.app.Use(s.withTimeout)
	// Around auth, so its refusals are recorded too (audit.go).
	audit, err := newAuditLog(st, log, s.fiberError, cfg.MetricsRegistry)
	if err != nil {
		return nil, err
	}
	s.app.Use(Prefix, audit.middleware)
	s.app.Use(Prefix, s.auth.middleware)
	s.app.Use(Prefix, attributeWrites)
	s.app.Use(Prefix, checkQuery)
	s.app.Use(Prefix, readPool)
	s.app.Use(Prefix, requireJSONBody)
	s.app.Use(Prefix, s.dryRun)
	s.app.Use(Prefix, s.idempotency)

	s.docs = newOpenAPIDoc(s)
	// These routes come before huma's own /openapi.* routes, so they win:
	// they serve the live document with every published kind's schemas.
	s.app.Get("/openapi.json", s.docs.serveJSON)
	s.app.Get("/openapi.yaml", s.docs.serveYAML)
	if err := s.registerDocs(); err != nil {
		return nil, err
	}
	if cfg.Metrics != nil {
		// Metrics name endpoints, kinds and error counts: a read, guarded
		// like one.
		s.app.Get("/metrics", s.auth.middleware, s.guard(metricsPermission), adaptor.HTTPHandler(cfg.Metrics))
	}

	hc := huma.DefaultConfig("Converge API", cfg.Version)
	hc.Info.Description = "Declarative control plane: kinds (manifests with JSON Schemas), resources, " +
		"provider configs and reactor bindings. Every error is an RFC 9457 application/problem+json document."
	// The default hooks add a $schema link to every response body; the API
	// keeps bodies exactly as documented instead.
	hc.CreateHooks = nil
	hc.SchemasPath = ""
	hc.RejectUnknownQueryParameters = true
	hc.Transformers = []huma.Transformer{problemTransformer}
	jf := jsonFormat()
	hc.Formats = map[string]huma.Format{"application/json": jf, "json": jf}
	// Each operation's security and 401/403 answers follow from its path
	// and method as the auth middleware decides (see operationAccess).
	hc.Components.SecuritySchemes = securitySchemes()
	hc.Tags = documentTags()
	hc.Servers = []*huma.Server{{URL: "/", Description: "The server that serves this document; every path carries its prefix (" + Prefix + ")."}}
	// huma's own docs page loads its viewer from a CDN; registerDocs serves
	// one from the binary.
	hc.DocsPath = ""
	if cfg.Events != nil {
		// Before huma's routes: a stream is written by Fiber directly.
		s.app.Get(Prefix+"/events/stream", s.guard(eventStreamPermission), cfg.Events.handler(cfg.WriteTimeout, s.namespaces))
	}
	s.api = humafiber.NewWithGroup(s.app, literalColons{s.app}, hc)
	// Before any operation is registered: huma wraps each in the
	// middlewares it has when the operation is registered.
	s.api.UseMiddleware(s.authorize)

	s.registerHealth()
	s.registerAuth()
	s.registerManifests()
	s.registerResources()
	s.registerResourceBatch()
	s.registerRecover()
	s.registerEngine()
	s.registerOperations()
	s.registerProviderConfigs()
	s.registerBindings()
	s.registerAlertSinks()
	s.registerRoleBindings()
	s.registerEndpoints()
	s.registerCluster()
	s.registerTopology()
	s.registerAudit()
	s.registerNamespaces()
	if cfg.Console != nil {
		if err := s.registerConsole(cfg.Console); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// App returns the Fiber app to serve (app.Listener) or test (app.Test).
func (s *Server) App() *fiber.App { return s.app }

// API returns the huma API, to register further operations (with paths
// under Prefix). They get the same auth, limits and problem responses, and
// need a cluster-wide admin unless the route-by-role table (rbac.go) lists
// their operation IDs; an
// error they return as huma.ErrorXxx or through ErrorFor is rendered as a
// Problem.
func (s *Server) API() huma.API { return s.api }

// ErrorFor maps an error from the store to the Problem the API answers
// with: *store.NotFoundError to 404, *store.InvalidError to 422 and so on
// (see problem.go); anything unexpected is logged and answered 500 without
// its text. in says where the request carried the fields the store names:
// "body", "path" or "query".
func (s *Server) ErrorFor(ctx context.Context, err error, in string) error {
	return s.problemFor(ctx, err, problemOpts{in: inPart(in)})
}

// withTimeout bounds each request's work. fasthttp gives handlers no context
// that ends when the client leaves, so this deadline is what stops a slow
// database call from holding a connection forever.
func (s *Server) withTimeout(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.RequestTimeout)
	defer cancel()
	c.SetUserContext(ctx)
	return c.Next()
}

// bodyDeadline gives a request whose headers have arrived ReadTimeout to
// send its body (fasthttp's HeaderReceived): the server's own read timeout,
// HeaderTimeout, is the headers'.
func (s *Server) bodyDeadline(*fasthttp.RequestHeader) fasthttp.RequestConfig {
	return fasthttp.RequestConfig{ReadTimeout: s.cfg.ReadTimeout}
}

// firstByteDeadline starts a new connection's header timeout as it is
// accepted (fasthttp's ConnState): with ReduceMemoryUsage, fasthttp waits
// for the first byte of a connection's first request under no deadline of
// its own, and a connection that sent nothing stayed open for ever.
func (s *Server) firstByteDeadline(c net.Conn, state fasthttp.ConnState) {
	if state == fasthttp.StateNew {
		_ = c.SetReadDeadline(time.Now().Add(s.cfg.HeaderTimeout)) // fails only on a closed connection
	}
}

// guardRequests answers, before Fiber routes a request, what Fiber would
// serve when it must not or answer outside the problem documents:
//
//   - a request whose header section a proxy could frame differently
//     (framing.Check: Transfer-Encoding, a bare LF, a folded line,
//     whitespace before a colon) is refused and its connection closed, so
//     that no byte after it is read as another request;
//   - a method not in Fiber's list (PROPFIND, a lowercase get), which Fiber
//     answers itself, before any middleware, with a plain-text 400.
func (s *Server) guardRequests() {
	serve, methods := s.app.Server().Handler, s.app.Config().RequestMethods
	s.app.Server().Handler = func(rc *fasthttp.RequestCtx) {
		p := framing.Check(rc.Request.Header.RawHeaders())
		if p != nil {
			rc.SetConnectionClose()
		} else if !slices.Contains(methods, string(rc.Method())) {
			p = newProblem(http.StatusBadRequest, typeMalformed, fmt.Sprintf("the method %q is not an HTTP method this server knows", rc.Method()))
		}
		if p == nil {
			serve(rc)
			return
		}
		c := s.app.AcquireCtx(rc)
		defer s.app.ReleaseCtx(c)
		if err := writeProblem(c, p); err != nil {
			s.log.Error("api: cannot answer a refused request", "err", err)
		}
	}
}

// answerUnreadable installs the answer to a request fasthttp cannot read:
// its line and headers over MaxHeaderBytes (431), a body over BodyLimit
// (413), a read that timed out (408), or framing it refuses itself
// (Content-Length twice, a Transfer-Encoding it does not know, a malformed
// line) (400). The answer is a problem document whose detail is fixed by
// the failure: the parser's own message quotes the raw request, headers and
// bearer token included, and Fiber's default handler sent it back as the
// detail. fasthttp builds that message without the request's bytes
// (SecureErrorLogMessage), logged at debug level, and closes the
// connection after the answer.
func (s *Server) answerUnreadable() {
	srv := s.app.Server()
	srv.SecureErrorLogMessage = true
	srv.ErrorHandler = func(rc *fasthttp.RequestCtx, err error) {
		s.log.Debug("api: refused a request it cannot read", "err", err)
		var (
			small *fasthttp.ErrSmallBuffer
			ne    net.Error
			p     *Problem
		)
		switch {
		case errors.As(err, &small):
			p = newProblem(http.StatusRequestHeaderFieldsTooLarge, typeHeadersTooLarge,
				fmt.Sprintf("the request line and headers are larger than the %d-byte limit", MaxHeaderBytes),
				ProblemError{Location: "header", Message: fmt.Sprintf("the request line and headers must be at most %d bytes together", MaxHeaderBytes)})
		case errors.Is(err, fasthttp.ErrBodyTooLarge):
			p = s.bodyTooLarge()
		case errors.As(err, &ne) && ne.Timeout():
			p = newProblem(http.StatusRequestTimeout, typeTimeout, "the request was not received in time")
		case errors.Is(err, fasthttp.ErrDuplicateContentLength):
			p = framing.DuplicateContentLength()
		case errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding):
			p = framing.TransferEncoding(false)
		default:
			p = framing.Unreadable()
		}
		body, err := json.Marshal(p)
		if err != nil {
			s.log.Error("api: cannot answer an unreadable request", "err", err)
			return
		}
		rc.Response.Reset()
		rc.SetStatusCode(p.Status)
		rc.SetContentType(ProblemContentType)
		rc.SetBody(body)
	}
}

func (s *Server) logPanic(c *fiber.Ctx, e any) {
	s.log.Error("api: handler panicked", "method", c.Method(), "path", c.Path(), "panic", e)
}

// tokenSum hashes a token so comparisons take the same time whatever its
// length.
func tokenSum(t string) [sha256.Size]byte { return sha256.Sum256([]byte(t)) }

// literalColons registers huma's routes with Fiber, whose paths use ':' to
// start a parameter: huma turns {kind} into :kind, always at the start of a
// segment, so a colon anywhere else is literal (the custom method of
// /resources:batch) and is escaped for Fiber.
type literalColons struct{ fiber.Router }

// Add escapes every colon that does not start a path segment.
func (r literalColons) Add(method, path string, handlers ...fiber.Handler) fiber.Router {
	var b strings.Builder
	for i := range len(path) {
		if path[i] == ':' && i > 0 && path[i-1] != '/' {
			b.WriteByte('\\')
		}
		b.WriteByte(path[i])
	}
	return r.Router.Add(method, b.String(), handlers...)
}

// operation fills what every operation shares and registers it. Handlers
// that take a body decode RawBody themselves (see the package doc); doc is
// the type the body is documented as, nil for none.
func register[I, O any](s *Server, op huma.Operation, doc any, h func(context.Context, *I) (*O, error)) {
	op.Path = Prefix + op.Path
	op.MaxBodyBytes = int64(s.cfg.BodyLimit) + 1 // huma refuses a body of exactly MaxBodyBytes
	op.SkipValidateBody = true
	switch op.Method {
	case http.MethodPost:
		// Read by the idempotency middleware, not the handler: documented here.
		op.Parameters = append(op.Parameters, idempotencyKeyParam())
	case http.MethodGet:
		// Read by the readPool middleware, likewise.
		op.Parameters = append(op.Parameters, consistentReadParam())
	}
	if op.Method != http.MethodGet {
		// Read by the dryRun middleware, likewise.
		if declaresDryRun(reflect.TypeFor[I]()) {
			panic("api: " + op.OperationID + " declares ?dry_run, which the dryRun middleware owns: read store.IsDryRun(ctx) instead")
		}
		op.Parameters = append(op.Parameters, dryRunParam())
	}
	registerOp(s.api, op, h)
	if op.Method != http.MethodGet {
		documentDryRun(s.api.OpenAPI(), &op)
	}
	if doc == nil {
		return
	}
	oapi := s.api.OpenAPI()
	item := oapi.Paths[op.Path]
	var target *huma.Operation
	switch op.Method {
	case http.MethodPost:
		target = item.Post
	case http.MethodPut:
		target = item.Put
	case http.MethodPatch:
		target = item.Patch
	}
	if target == nil {
		panic("api: cannot document the body of " + op.Method + " " + op.Path)
	}
	sch := oapi.Components.Schemas.Schema(reflect.TypeOf(doc), true, op.OperationID+"Request")
	target.RequestBody = &huma.RequestBody{
		Required: true,
		Content:  map[string]*huma.MediaType{"application/json": {Schema: sch}},
	}
}

// registerOp registers op, and for a GET the same handler for HEAD: a HEAD
// answers exactly like the GET (status, headers, Content-Length) and
// fasthttp leaves the body out. The HEAD twin is hidden from the OpenAPI
// document, which implies HEAD for every GET.
func registerOp[I, O any](api huma.API, op huma.Operation, h func(context.Context, *I) (*O, error)) {
	huma.Register(api, op, h)
	if op.Method != http.MethodGet {
		return
	}
	head := op
	head.Method, head.OperationID, head.Hidden = http.MethodHead, op.OperationID+"-head", true
	huma.Register(api, head, h)
}
