package api

import (
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// TestRouteLabel pins the label normalisation: a route's Fiber path back to
// its OpenAPI template, and every request no route answered to one value.
func TestRouteLabel(t *testing.T) {
	t.Parallel()
	if useField == nil {
		t.Fatal("fiber.Route has no bool field use: middleware routes would be labelled by their prefix")
	}
	h := []fiber.Handler{func(*fiber.Ctx) error { return nil }}
	for _, tc := range []struct {
		route *fiber.Route
		want  string
	}{
		{&fiber.Route{Method: "GET", Path: "/api/v1/resources/:kind/:name", Handlers: h}, "/api/v1/resources/{kind}/{name}"},
		{&fiber.Route{Method: "GET", Path: "/api/v1/resources/:kind/:name/events", Handlers: h}, "/api/v1/resources/{kind}/{name}/events"},
		{&fiber.Route{Method: "POST", Path: `/api/v1/resources\:batch`, Handlers: h}, "/api/v1/resources:batch"},
		{&fiber.Route{Method: "POST", Path: `/api/v1/resources/:kind/:name/ops\:run`, Handlers: h}, "/api/v1/resources/{kind}/{name}/ops:run"},
		{&fiber.Route{Method: "GET", Path: "/api/v1/kinds", Handlers: h}, "/api/v1/kinds"},
		{&fiber.Route{Method: "GET", Path: "/assets/*", Handlers: h}, "/assets/*"},
		{&fiber.Route{Method: "GET", Path: "/", Handlers: h}, "/"},
		// Fiber's fallback route carries the raw path and no handlers.
		{&fiber.Route{Method: "GET", Path: "/api/v1/resources/leaf/some-name"}, routeUnrouted},
		{nil, routeUnrouted},
	} {
		if got := routeLabel(tc.route); got != tc.want {
			t.Errorf("routeLabel(%+v) = %q, want %q", tc.route, got, tc.want)
		}
	}

	// On a live app: what only middleware answered is unrouted, though its
	// route copy carries the request's method and the middleware's prefix.
	app := fiber.New()
	var got string
	app.Use(func(c *fiber.Ctx) error {
		err := c.Next()
		got = routeLabel(c.Route())
		return err
	})
	app.Use("/", func(c *fiber.Ctx) error { return c.Next() })
	app.Use("/api", func(c *fiber.Ctx) error {
		if c.Get("Authorization") == "" {
			return c.SendStatus(fiber.StatusUnauthorized)
		}
		return c.Next()
	})
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("root") })
	app.Get("/api/things/:id", func(c *fiber.Ctx) error { return c.SendString(c.Params("id")) })
	for _, tc := range []struct{ path, auth, want string }{
		{"/api/things/42", "x", "/api/things/{id}"},
		{"/api/things/42", "", routeUnrouted},
		{"/api/nothing", "x", routeUnrouted},
		{"/", "", "/"},
		{"/elsewhere", "", routeUnrouted},
	} {
		req := httptest.NewRequest("GET", tc.path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		got = ""
		if _, err := app.Test(req); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("GET %s (auth %q): route %q, want %q", tc.path, tc.auth, got, tc.want)
		}
	}
}

func TestMethodLabel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"GET": "GET", "HEAD": "HEAD", "DELETE": "DELETE", "PATCH": "PATCH",
		"CONNECT": "other", "TRACE": "other", "get": "other", "": "other"} {
		if got := methodLabel(in); got != want {
			t.Errorf("methodLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
