package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Authenticator verifies a bearer token that is none of the static tokens
// and not an OIDC token of the configured issuer, and names its caller: a
// Subject and the Groups role bindings may name, with TokenName empty and
// Anonymous false.
type Authenticator interface {
	// Authenticate returns the caller token identifies, or an error: a
	// *Problem is answered as is (a 503 while the issuer cannot be reached,
	// say), any other error means the token identifies no one (bad
	// signature, expired, wrong audience) and is answered 401 with its text.
	Authenticate(ctx context.Context, token string) (Principal, error)
}

// auth checks bearer tokens: a read token may call GET and HEAD, an admin
// token anything; an OIDC token (when OIDC is configured) or one the
// Authenticator accepts names a user, who may call what the user's role
// bindings allow (rbac.go). With no tokens, no OIDC and no Authenticator
// every request passes.
type auth struct {
	read, admin [][32]byte
	oidc        *oidcVerifier
	authn       Authenticator
}

// Static tokens are named by their list and position ("admin-0", "read-1"):
// the name, never the token, is what the audit trail records. oc, when not
// nil, adds OIDC tokens; authn, when not nil, any other kind.
func newAuth(read, admin []string, oc *OIDCConfig, authn Authenticator) *auth {
	a := &auth{authn: authn}
	for _, t := range read {
		a.read = append(a.read, tokenSum(t))
	}
	for _, t := range admin {
		a.admin = append(a.admin, tokenSum(t))
	}
	if oc != nil {
		a.oidc = newOIDCVerifier(*oc)
	}
	return a
}

func (a *auth) enabled() bool {
	return len(a.read)+len(a.admin) > 0 || a.oidc != nil || a.authn != nil
}

// indexOf compares in constant time against every token, so timing reveals
// neither which token matched nor how much of one did; it returns the
// matching token's position, or -1.
func indexOf(sum [32]byte, tokens [][32]byte) int {
	at := -1
	for i, t := range tokens {
		eq := subtle.ConstantTimeCompare(sum[:], t[:])
		at = subtle.ConstantTimeSelect(eq, i, at)
	}
	return at
}

func (a *auth) middleware(c *fiber.Ctx) error {
	if c.Path() == Prefix+authConfigPath {
		// How to sign in is asked before signing in.
		return c.Next()
	}
	p, refused, challenge := a.check(c.UserContext(), c.Get(fiber.HeaderAuthorization), c.Method())
	if p.Subject != "" {
		// A refused caller who is known (a read token on a write) is
		// named too, for whoever records the refusal.
		c.SetUserContext(withPrincipal(c.UserContext(), p))
	}
	if refused == nil {
		return c.Next()
	}
	if challenge != "" {
		c.Set(fiber.HeaderWWWAuthenticate, challenge)
	}
	return writeProblem(c, refused)
}

// check decides a request from its Authorization header and method: the
// caller (when known, even if refused), and the problem to answer when it
// may not proceed with, for a 401, the WWW-Authenticate challenge (RFC
// 6750: error="invalid_token" with an error_description saying why a
// token was refused). Whether a named user may do what it asks is the
// role check's (rbac.go); here only a static read token is held to reads.
func (a *auth) check(ctx context.Context, header, method string) (Principal, *Problem, string) {
	if !a.enabled() {
		return Principal{Subject: "anonymous", Anonymous: true}, nil, ""
	}
	scheme, token, ok := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return Principal{}, newProblem(http.StatusUnauthorized, typeUnauthorized,
			"a bearer token is required: send Authorization: Bearer <token>"), `Bearer realm="converge"`
	}
	if a.oidc != nil && looksLikeJWT(token) {
		p, err := a.oidc.verify(ctx, token)
		var te *tokenError
		switch {
		case errors.As(err, &te):
			return Principal{}, newProblem(http.StatusUnauthorized, typeUnauthorized, "the bearer token is not valid: "+te.description),
				`Bearer realm="converge", error="invalid_token", error_description=` + strconv.Quote(te.description)
		case err != nil:
			return Principal{}, newProblem(http.StatusServiceUnavailable, typeUnavailable,
				err.Error()+"; retry the request later").RetryAfter(RetryAfterUnreachable), ""
		}
		return p, nil, ""
	}
	sum := tokenSum(token)
	admin, read := indexOf(sum, a.admin), indexOf(sum, a.read)
	var p Principal
	switch {
	case admin >= 0:
		p.TokenName = "admin-" + strconv.Itoa(admin)
	case read >= 0:
		p.TokenName = "read-" + strconv.Itoa(read)
	case a.authn != nil:
		p, err := a.authn.Authenticate(ctx, token)
		var prob *Problem
		switch {
		case errors.As(err, &prob):
			return Principal{}, prob, ""
		case err != nil:
			return Principal{}, newProblem(http.StatusUnauthorized, typeUnauthorized, "the bearer token is not valid: "+err.Error()),
				`Bearer realm="converge", error="invalid_token"`
		}
		p.TokenName, p.Anonymous = "", false
		return p, nil, ""
	default:
		return Principal{}, newProblem(http.StatusUnauthorized, typeUnauthorized, "the bearer token is not valid"),
			`Bearer realm="converge", error="invalid_token", error_description="the token is not one this server knows"`
	}
	p.Subject = "token:" + p.TokenName
	if admin < 0 && !isRead(method) {
		return p, newProblem(http.StatusForbidden, typeForbidden,
			"this token may only read; "+method+" needs an admin token"), ""
	}
	return p, nil, ""
}

// staticRole is the role a static token's name (principal) grants
// cluster-wide: an admin token's admin, a read token's viewer.
func staticRole(tokenName string) role {
	if strings.HasPrefix(tokenName, "admin-") {
		return roleAdmin
	}
	return roleViewer
}

// readyCheck is the "oidc" readiness check, or nil without OIDC. It is
// advisory: while the issuer cannot be reached, OIDC tokens are answered
// 503 but static tokens and everything else work, so the process stays
// ready.
func (a *auth) readyCheck() *ReadyCheck {
	if a.oidc == nil {
		return nil
	}
	return &ReadyCheck{Name: "oidc", Check: a.oidc.check, Advisory: true}
}

// RequireReadToken guards h (a net/http handler outside the API, such as
// /metrics on a pod without the API) like the API's read routes: with
// tokens or OIDC configured, a read or admin bearer token or an OIDC token
// is required and only GET and HEAD pass; with neither, h is open.
func RequireReadToken(readTokens, adminTokens []string, oc *OIDCConfig, h http.Handler) http.Handler {
	a := newAuth(readTokens, adminTokens, oc, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, p, challenge := a.check(r.Context(), r.Header.Get("Authorization"), r.Method)
		if p == nil {
			h.ServeHTTP(w, r)
			return
		}
		if challenge != "" {
			w.Header().Set("WWW-Authenticate", challenge)
		}
		p.Write(w, r)
	})
}

func isRead(method string) bool {
	return method == fiber.MethodGet || method == fiber.MethodHead || method == fiber.MethodOptions
}

// requireJSONBody refuses a request body declared as anything but JSON,
// before any handler reads it; POST /resources:batch also takes NDJSON. A
// body without a Content-Type is read as JSON.
func requireJSONBody(c *fiber.Ctx) error {
	if isRead(c.Method()) || len(c.Request().Body()) == 0 && c.Request().Header.ContentLength() <= 0 {
		return c.Next()
	}
	ct := c.Get(fiber.HeaderContentType)
	if ct == "" {
		return c.Next()
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && mt == ndjsonType && c.Path() == Prefix+batchPath {
		return c.Next()
	}
	if err != nil || mt != "application/json" && !strings.HasSuffix(mt, "+json") {
		p := newProblem(http.StatusUnsupportedMediaType, typeUnsupportedMediaType,
			"request bodies must be JSON (Content-Type: application/json)")
		p.Errors = []ProblemError{{Location: "header.Content-Type", Message: "must be application/json", Value: ct}}
		return writeProblem(c, p)
	}
	return c.Next()
}
