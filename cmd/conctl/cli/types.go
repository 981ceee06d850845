package cli

import (
	"slices"
	"strings"
)

// objectType is one kind of API object conctl handles.
type objectType struct {
	name    string   // canonical, singular: "resource"
	aliases []string // accepted everywhere a type is named
	plural  string   // for messages: "resources"
	// namespaced: its objects live in a namespace (-n, -A), rather than
	// cluster-wide.
	namespaced bool
}

// The object types. Type names and aliases are matched case-insensitively.
var (
	typeResource = &objectType{name: "resource", plural: "resources", namespaced: true,
		aliases: []string{"res", "resources"}}
	typeManifest = &objectType{name: "manifest", plural: "manifests",
		aliases: []string{"crd", "crds", "manifests", "kind", "kinds"}}
	typeProviderConfig = &objectType{name: "providerconfig", plural: "provider configs", namespaced: true,
		aliases: []string{"pc", "pcs", "providerconfigs"}}
	typeReactorBinding = &objectType{name: "reactorbinding", plural: "reactor bindings", namespaced: true,
		aliases: []string{"rb", "rbs", "reactorbindings", "binding", "bindings"}}
	typeEndpoint = &objectType{name: "endpoint", plural: "endpoints", namespaced: true,
		aliases: []string{"ep", "eps", "endpoints"}}
	typeKindConfig = &objectType{name: "kindconfig", plural: "kind configs",
		aliases: []string{"config", "configs", "kindconfigs"}}
	typeAlertSink = &objectType{name: "alertsink", plural: "alert sinks",
		aliases: []string{"sink", "sinks", "alertsinks"}}
	// typeRoleBinding is a role binding: `create`, `get` and `delete` know it.
	typeRoleBinding = &objectType{name: "rolebinding", plural: "role bindings",
		aliases: []string{"rolebindings"}}

	// typeKinds is the kinds listing (GET /kinds); only `list` knows it.
	typeKinds = &objectType{name: "kinds", plural: "kinds", aliases: []string{"kind"}}
	// typeClusterMember is the cluster view (GET /cluster-members); only
	// `list` knows it.
	typeClusterMember = &objectType{name: "clustermember", plural: "cluster members",
		aliases: []string{"cluster", "members", "clustermembers"}}
	// typeOperation is a resource's operation (`ops`).
	typeOperation = &objectType{name: "operation", plural: "operations"}
	// typeRevision is a resource's spec revision (`history`).
	typeRevision = &objectType{name: "revision", plural: "spec revisions"}
	// typeDelivery is an attempt of the delivery log (`deliveries`).
	typeDelivery = &objectType{name: "delivery", plural: "deliveries", namespaced: true}
	// typeAudit is an entry of the audit trail (`audit`).
	typeAudit = &objectType{name: "auditentry", plural: "audit entries"}
	// typeNamespace is a namespace (get, list, create, delete).
	typeNamespace = &objectType{name: "namespace", plural: "namespaces",
		aliases: []string{"ns", "namespaces"}}
)

// applyTypes are the types `apply --type` and a document's `type` field accept.
var applyTypes = []*objectType{typeResource, typeManifest, typeProviderConfig,
	typeReactorBinding, typeEndpoint, typeKindConfig, typeAlertSink}

// lookupType resolves a type name or alias among applyTypes.
func lookupType(s string) (*objectType, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, t := range applyTypes {
		if t.name == s || slices.Contains(t.aliases, s) {
			return t, true
		}
	}
	return nil, false
}

// typeNames lists the canonical names of ts, for help and error text.
func typeNames(ts []*objectType) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.name
	}
	return strings.Join(names, ", ")
}

// without returns aliases minus the ones listed.
func without(aliases []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(aliases), func(a string) bool { return slices.Contains(drop, a) })
}
