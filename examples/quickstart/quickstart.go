// Package quickstart holds the quickstart's manifests and sample resource,
// embedded in the quickstart-provider binary (./cmd/quickstart-provider),
// whose `objects` command prints them: `converge dev --demo` gets them from
// the provider it starts, so the converge binary links no example code and
// needs no checkout. The provider that serves these kinds is in ./provider.
package quickstart

import "embed"

// Files holds manifests/*.json and resources/*.json.
//
//go:embed manifests/*.json resources/*.json
var Files embed.FS // read-only embedded data

// Manifests lists the manifest files in the order they should be applied.
var Manifests = []string{"manifests/bucket.json", "manifests/cdn.json", "manifests/site.json"} // constant list

// Resources lists the sample resources.
var Resources = []string{"resources/shop.json"} // constant list
