// Package classic holds the classic demo's fixtures, embedded in the
// classic-provider binary (./cmd/classic-provider), whose `objects` command
// prints what a demo applies. The providers that serve these kinds are in
// ./provider; README.md walks through the demo.
package classic

import (
	"embed"
	"encoding/json"
	"fmt"
	"path"
)

// Files holds testfixtures/, including the versioning walkthrough's fixtures
// under testfixtures/versioning.
//
//go:embed testfixtures
var Files embed.FS // read-only embedded data

// The fixtures Objects returns, in the order to apply them: a kind before its
// configs, the reactor kind before the binding that names it.
var (
	manifests = []string{"account.kind.json", "vpc.kind.json", "vpc-v2.kind.json", "tgw.kind.json",
		"route.kind.json", "statussink.kind.json", "classicbom.kind.json"}
	providerConfigs = []string{"providerconfig-vpc-v1-default.json", "providerconfig-vpc-v2-default.json",
		"providerconfig-statussink.json"}
	bindings = []string{"reactor-binding-classicbom-to-statussink.json"}
	boms     = map[string]string{
		"small":   "resource-classicbom.json",
		"large":   "resource-classicbom-large.json",
		"updated": "resource-classicbom-updated.json",
	}
)

// Objects is what `classic-provider objects` prints: everything a demo applies,
// each element a document the REST API accepts as is (manifests with PUT
// /kinds/{kind}/manifest, provider configs with POST /providerconfigs,
// bindings with POST /reactor-bindings, resources with POST /resources).
type Objects struct {
	// Manifests are the kinds, in the order to apply them.
	Manifests []json.RawMessage `json:"manifests"`
	// ProviderConfigs are the default configs of vpc/1, vpc/2 and statussink.
	ProviderConfigs []json.RawMessage `json:"providerconfigs"`
	// Bindings subscribe statussink to classicbom's synced transition.
	Bindings []json.RawMessage `json:"bindings"`
	// Resources holds the one classicbom root of the chosen BOM.
	Resources []json.RawMessage `json:"resources"`
}

// BOMs are the names ObjectsFor accepts.
var BOMs = []string{"small", "large", "updated"} // constant list

// ObjectsFor returns the objects of the demo with the BOM named bom (one of
// BOMs).
func ObjectsFor(bom string) (Objects, error) {
	file, ok := boms[bom]
	if !ok {
		return Objects{}, fmt.Errorf("no BOM %q: want one of %v", bom, BOMs)
	}
	var o Objects
	for _, set := range []struct {
		files []string
		into  *[]json.RawMessage
	}{{manifests, &o.Manifests}, {providerConfigs, &o.ProviderConfigs}, {bindings, &o.Bindings}, {[]string{file}, &o.Resources}} {
		for _, f := range set.files {
			b, err := Fixture(f)
			if err != nil {
				return Objects{}, err
			}
			*set.into = append(*set.into, b)
		}
	}
	return o, nil
}

// Fixture returns the fixture at name, relative to testfixtures/, checked to
// be JSON.
func Fixture(name string) (json.RawMessage, error) {
	b, err := Files.ReadFile(path.Join("testfixtures", name))
	if err != nil {
		return nil, fmt.Errorf("fixture %s: %w", name, err)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("fixture %s is not JSON", name)
	}
	return b, nil
}
