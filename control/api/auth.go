package api

import (
	"crypto/subtle"
	"mime"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// auth checks bearer tokens: a read token may call GET and HEAD, an admin
// token anything. With no tokens configured every request passes.
type auth struct {
	read, admin [][32]byte
}

func newAuth(read, admin []string) *auth {
	a := &auth{}
	for _, t := range read {
		a.read = append(a.read, tokenSum(t))
	}
	for _, t := range admin {
		a.admin = append(a.admin, tokenSum(t))
	}
	return a
}

func (a *auth) enabled() bool { return len(a.read)+len(a.admin) > 0 }

// anyOf compares in constant time against every token, so timing reveals
// neither which token matched nor how much of one did.
func anyOf(sum [32]byte, tokens [][32]byte) bool {
	found := 0
	for _, t := range tokens {
		found |= subtle.ConstantTimeCompare(sum[:], t[:])
	}
	return found == 1
}

func (a *auth) middleware(c *fiber.Ctx) error {
	if !a.enabled() {
		return c.Next()
	}
	h := c.Get(fiber.HeaderAuthorization)
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="converge"`)
		return writeProblem(c, newProblem(http.StatusUnauthorized, typeUnauthorized,
			"a bearer token is required: send Authorization: Bearer <token>"))
	}
	sum := tokenSum(strings.TrimSpace(token))
	admin := anyOf(sum, a.admin)
	read := admin || anyOf(sum, a.read)
	switch {
	case !read:
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="converge", error="invalid_token"`)
		return writeProblem(c, newProblem(http.StatusUnauthorized, typeUnauthorized, "the bearer token is not valid"))
	case !admin && !isRead(c.Method()):
		return writeProblem(c, newProblem(http.StatusForbidden, typeForbidden,
			"this token may only read; "+c.Method()+" needs an admin token"))
	}
	return c.Next()
}

func isRead(method string) bool {
	return method == fiber.MethodGet || method == fiber.MethodHead || method == fiber.MethodOptions
}

// requireJSONBody refuses a request body declared as anything but JSON,
// before any handler reads it. A body without a Content-Type is read as
// JSON.
func requireJSONBody(c *fiber.Ctx) error {
	if isRead(c.Method()) || len(c.Request().Body()) == 0 && c.Request().Header.ContentLength() <= 0 {
		return c.Next()
	}
	ct := c.Get(fiber.HeaderContentType)
	if ct == "" {
		return c.Next()
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		p := newProblem(http.StatusUnsupportedMediaType, typeUnsupportedMediaType,
			"request bodies must be JSON (Content-Type: application/json)")
		p.Errors = []ProblemError{{Location: "header.Content-Type", Message: "must be application/json", Value: ct}}
		return writeProblem(c, p)
	}
	return c.Next()
}
