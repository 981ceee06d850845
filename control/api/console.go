package api

import (
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// ConsolePages are the console's client-side routes: /<page> and anything
// under it answer the console's index.html, and the app routes in the
// browser. Every other path outside the API keeps its 404 problem.
var ConsolePages = []string{"resources", "graph", "kinds", "providerconfigs", "bindings", "endpoints", "cluster", "deliveries", "audit"}

// consoleCSP keeps the console to its own origin: scripts, styles, images
// and API calls all come from the server that served it, and it cannot be
// framed. Inline styles are allowed for the attributes the graph library
// and React set.
const consoleCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"

// consoleFile is one file of the console, read once at start.
type consoleFile struct {
	body        []byte
	contentType string
}

// console serves the web console's files from memory.
type console struct {
	files map[string]consoleFile // by path relative to the root: index.html, assets/app-1a2b.js
	// oidc, when set, is the issuer the console signs in with: its page
	// may also connect to the issuer's origins (consoleCSP allows 'self'
	// only).
	oidc *oidcVerifier
}

// newConsole reads every file of fsys, which must hold index.html at its
// root.
func newConsole(fsys fs.FS) (*console, error) {
	c := &console{files: map[string]consoleFile{}}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		c.files[p] = consoleFile{body: b, contentType: contentTypeOf(p)}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("api: reading the console's files: %w", err)
	}
	if _, ok := c.files["index.html"]; !ok {
		return nil, fmt.Errorf("api: the console's files have no index.html")
	}
	return c, nil
}

// contentTypeOf names the type of a console file by its extension, without
// the machine's MIME tables: the same binary serves the same types
// everywhere.
func contentTypeOf(p string) string {
	switch strings.ToLower(path.Ext(p)) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".json", ".map":
		return "application/json"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".ico":
		return "image/x-icon"
	case ".woff2":
		return "font/woff2"
	case ".txt":
		return "text/plain; charset=utf-8"
	}
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// registerConsole serves the console at / and its client-side routes.
// Static files need no token, like /docs: the app asks for one when the
// API answers 401, and sends it on every API call.
func (s *Server) registerConsole(fsys fs.FS) error {
	c, err := newConsole(fsys)
	if err != nil {
		return err
	}
	c.oidc = s.auth.oidc
	// Fiber's Get registers HEAD too.
	s.app.Get("/", c.index)
	for _, p := range ConsolePages {
		s.app.Get("/"+p, c.index)
		s.app.Get("/"+p+"/*", c.index)
	}
	for p := range c.files {
		if p != "index.html" && !strings.Contains(p, "/") {
			s.app.Get("/"+p, c.file)
		}
	}
	s.app.Get("/assets/*", c.file)
	return nil
}

// index answers the app's page for every client-side route. It is never
// cached, so a new binary's console loads at once; the assets it names are
// content-hashed and cached for good.
func (c *console) index(ctx *fiber.Ctx) error {
	ctx.Set(fiber.HeaderCacheControl, "no-cache")
	return c.send(ctx, c.files["index.html"])
}

// file answers one of the console's files, or a 404 problem.
func (c *console) file(ctx *fiber.Ctx) error {
	name := strings.TrimPrefix(ctx.Path(), "/")
	f, ok := c.files[name]
	if !ok {
		return writeProblem(ctx, newProblem(http.StatusNotFound, typeNotFound, "the console has no file "+name))
	}
	if strings.HasPrefix(name, "assets/") {
		ctx.Set(fiber.HeaderCacheControl, "public, max-age=31536000, immutable")
	}
	return c.send(ctx, f)
}

func (c *console) send(ctx *fiber.Ctx, f consoleFile) error {
	ctx.Set(fiber.HeaderContentType, f.contentType)
	ctx.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	ctx.Set(fiber.HeaderReferrerPolicy, "no-referrer")
	csp := consoleCSP
	if c.oidc != nil {
		csp = strings.Replace(csp, "connect-src 'self'", "connect-src 'self' "+strings.Join(c.oidc.connectSources(ctx.UserContext()), " "), 1)
	}
	ctx.Set(fiber.HeaderContentSecurityPolicy, csp)
	return ctx.Send(f.body)
}
