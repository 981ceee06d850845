// Package ui holds the web console's files for converge to serve at /.
//
// The console is a single-page app built with npm (`make ui`) into
// site/dist, which git ignores. A binary built without it embeds only
// site/placeholder, a page saying how to build the console, so `go build`
// never needs Node.
package ui

import (
	"embed"
	"io/fs"
)

//go:embed all:site
var site embed.FS

// Files returns the console to serve: the built one (index.html at the
// root, hashed files under assets/) when site/dist was built before this
// binary, else the placeholder page. built says which.
func Files() (files fs.FS, built bool) {
	return Site(site, "ui")
}

// Site picks, in an embedded site folder, site/dist when it was built
// (it holds index.html), else the committed site/placeholder. pkg names
// the embedding package in the panic a missing placeholder would be.
func Site(site fs.FS, pkg string) (files fs.FS, built bool) {
	if dist, err := fs.Sub(site, "site/dist"); err == nil {
		if _, err := fs.Stat(dist, "index.html"); err == nil {
			return dist, true
		}
	}
	placeholder, err := fs.Sub(site, "site/placeholder")
	if err != nil {
		panic(pkg + ": the embedded placeholder is missing: " + err.Error()) // cannot happen: it is committed
	}
	return placeholder, false
}
