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
)

//go:embed all:site
var site embed.FS

// Files returns the viewer's files to serve under /docs: the built viewer
// (index.html, the page, beside Swagger UI's files) when site/dist was
// built before this binary, else the placeholder page. built says which.
func Files() (files fs.FS, built bool) {
	if dist, err := fs.Sub(site, "site/dist"); err == nil {
		if _, err := fs.Stat(dist, "index.html"); err == nil {
			return dist, true
		}
	}
	placeholder, err := fs.Sub(site, "site/placeholder")
	if err != nil {
		panic("apidocs: the embedded placeholder is missing: " + err.Error()) // cannot happen: it is committed
	}
	return placeholder, false
}
