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
// (an OIDC token, say) and names its caller: a Subject and the Groups role
// bindings may name, with TokenName empty and Anonymous false.
type Authenticator interface {
	// Authenticate returns the caller token identifies, or an error: a
	// *Problem is answered as is (a 503 while the issuer cannot be reached,
	// say), any other error means the token identifies no one (bad
	// signature, expired, wrong audience) and is answered 401 with its text.
	Authenticate(ctx context.Context, token string) (Principal, error)
}

// auth checks bearer tokens: a read token may call GET and HEAD, an admin
// token anything; a token the Authenticator accepts may call what its
// caller's role bindings allow (rbac.go). With no tokens and no
// Authenticator configured every request passes.
type auth struct {
	read, admin [][32]byte
	authn       Authenticator
}

// Static tokens are named by their list and position ("admin-0", "read-1"):
// the name, never the token, is what the audit trail records.
func newAuth(read, admin []string, authn Authenticator) *auth {
	a := &auth{authn: authn}
	for _, t := range read {
		a.read = append(a.read, tokenSum(t))
	}
	for _, t := range admin {
		a.admin = append(a.admin, tokenSum(t))
	}
	return a
}

func (a *auth) enabled() bool { return len(a.read)+len(a.admin) > 0 || a.authn != nil }

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
	header := c.Get(fiber.HeaderAuthorization)
	p, challenge := a.check(header, c.Method())
	if p == nil {
		c.SetUserContext(withPrincipal(c.UserContext(), a.principal(header)))
		return c.Next()
	}
	// A bearer token that is none of the static ones: the Authenticator's.
	if token := bearer(header); a.authn != nil && token != "" && p.Status == http.StatusUnauthorized {
		who, err := a.authn.Authenticate(c.UserContext(), token)
		if err == nil {
			who.TokenName, who.Anonymous = "", false
			c.SetUserContext(withPrincipal(c.UserContext(), who))
			return c.Next()
		}
		if !errors.As(err, &p) {
			p = newProblem(http.StatusUnauthorized, typeUnauthorized, "the bearer token is not valid: "+err.Error())
		} else if p.Status != http.StatusUnauthorized {
			challenge = ""
		}
	}
	if challenge != "" {
		c.Set(fiber.HeaderWWWAuthenticate, challenge)
	}
	return writeProblem(c, p)
}

// check decides a request from its Authorization header and method: nil
// when it may proceed, else the problem to answer and, for a 401, the
// WWW-Authenticate challenge.
func (a *auth) check(header, method string) (*Problem, string) {
	if !a.enabled() {
		return nil, ""
	}
	token := bearer(header)
	if token == "" {
		return newProblem(http.StatusUnauthorized, typeUnauthorized,
			"a bearer token is required: send Authorization: Bearer <token>"), `Bearer realm="converge"`
	}
	sum := tokenSum(token)
	admin := indexOf(sum, a.admin) >= 0
	read := admin || indexOf(sum, a.read) >= 0
	switch {
	case !read:
		return newProblem(http.StatusUnauthorized, typeUnauthorized, "the bearer token is not valid"),
			`Bearer realm="converge", error="invalid_token"`
	case !admin && !isRead(method):
		return newProblem(http.StatusForbidden, typeForbidden,
			"this token may only read; "+method+" needs an admin token"), ""
	}
	return nil, ""
}

// bearer is the token of an Authorization header of the Bearer scheme, or
// "".
func bearer(header string) string {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// staticRole is the role a static token's name (principal) grants
// cluster-wide: an admin token's admin, a read token's viewer.
func staticRole(tokenName string) role {
	if strings.HasPrefix(tokenName, "admin-") {
		return roleAdmin
	}
	return roleViewer
}

// principal names the caller of a request check let through.
func (a *auth) principal(header string) Principal {
	if !a.enabled() {
		return Principal{Subject: "anonymous", Anonymous: true}
	}
	_, token, _ := strings.Cut(header, " ")
	sum := tokenSum(strings.TrimSpace(token))
	name := "read-" + strconv.Itoa(indexOf(sum, a.read))
	if i := indexOf(sum, a.admin); i >= 0 {
		name = "admin-" + strconv.Itoa(i)
	}
	return Principal{Subject: "token:" + name, TokenName: name}
}

// RequireReadToken guards h (a net/http handler outside the API, such as
// /metrics on a pod without the API) like the API's read routes: with
// tokens configured, a read or admin bearer token is required and only
// GET and HEAD pass; with none, h is open.
func RequireReadToken(readTokens, adminTokens []string, h http.Handler) http.Handler {
	a := newAuth(readTokens, adminTokens, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, challenge := a.check(r.Header.Get("Authorization"), r.Method)
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
