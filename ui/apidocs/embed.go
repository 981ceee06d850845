// Package apidocs holds the API reference viewer converge serves at /docs:
// Swagger UI's prebuilt bundle (npm swagger-ui-dist, pinned in
// package-lock.json) and src/'s page that loads it, which make docs-viewer
// copies into site/dist. git ignores site/dist: a binary built without it
// embeds only site/placeholder, a page saying how to build the viewer, so
// `go build` never needs Node.
package apidocs

import (
	"embed"
	"io/fs"

	"github.com/convergeplane/converge/ui"
)

//go:embed all:site
var site embed.FS

// Files returns the viewer's files to serve under /docs: the built viewer
// (index.html, the page, beside Swagger UI's files) when site/dist was
// built before this binary, else the placeholder page. built says which.
func Files() (files fs.FS, built bool) {
	return ui.Site(site, "apidocs")
}
