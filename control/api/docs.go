package api

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/convergeplane/converge/ui/apidocs"
)

// DocsPath is where the API reference viewer is served: the page at
// DocsPath, its files under DocsPath/.
const DocsPath = "/docs"

// docsCSP keeps the viewer to its own origin, stricter than the console's:
// Swagger UI sets no inline style or script, so none is allowed. Images may
// be data: URLs (the icons in swagger-ui.css). Try it out calls the API on
// this origin (connect-src 'self').
const docsCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// docsFile is one file of the viewer, read once at start, with its entity
// tag: the names do not change between versions, so a browser revalidates
// each time (no-cache) and gets 304 while the binary is the same.
type docsFile struct {
	consoleFile
	etag string
}

// registerDocs serves the viewer apidocs embeds (see ui/apidocs): the page
// at DocsPath and its files under it. Like the console's, they need no
// token.
func (s *Server) registerDocs() error {
	fsys, _ := apidocs.Files()
	files := map[string]docsFile{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		files[p] = docsFile{consoleFile{body: b, contentType: contentTypeOf(p)}, `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`}
		return nil
	})
	if err != nil {
		return fmt.Errorf("api: reading the docs viewer's files: %w", err)
	}
	if _, ok := files["index.html"]; !ok {
		return fmt.Errorf("api: the docs viewer's files have no index.html")
	}
	serve := func(c *fiber.Ctx) error {
		name := strings.TrimPrefix(strings.TrimPrefix(c.Path(), DocsPath), "/")
		if name == "" {
			name = "index.html"
		}
		f, ok := files[name]
		if !ok {
			return writeProblem(c, newProblem(http.StatusNotFound, typeNotFound, "the docs viewer has no file "+name))
		}
		c.Set(fiber.HeaderCacheControl, "no-cache")
		c.Set(fiber.HeaderETag, f.etag)
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
		c.Set(fiber.HeaderContentSecurityPolicy, docsCSP)
		if c.Get(fiber.HeaderIfNoneMatch) == f.etag {
			return c.SendStatus(http.StatusNotModified)
		}
		c.Set(fiber.HeaderContentType, f.contentType)
		return c.Send(f.body)
	}
	// Fiber's Get registers HEAD too.
	s.app.Get(DocsPath, serve)
	s.app.Get(DocsPath+"/*", serve)
	return nil
}
