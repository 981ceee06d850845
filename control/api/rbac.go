package api

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humafiber"
	"github.com/gofiber/fiber/v2"

	"github.com/convergeplane/converge/control/store"
)

// Roles (docs/api.md "Roles and role bindings"): each includes what the
// ones before it may do. noRole is a caller's role where nothing grants it
// one.
type role int

const (
	noRole role = iota
	roleViewer
	roleEditor
	roleOperator
	roleAdmin
)

// String is the role's name as bindings spell it (store.Roles).
func (r role) String() string {
	if r == noRole {
		return "none"
	}
	return store.Roles[r-1]
}

func parseRole(s string) role { return role(slices.Index(store.Roles, s) + 1) }

// scope says where a permission's role must be held.
type scope int

const (
	// inNamespace: in the request's namespace (its namespace query
	// parameter, default store.DefaultNamespace; store.AllNamespaces needs the role
	// cluster-wide).
	inNamespace scope = iota
	// clusterWide: by a cluster-wide binding (or a static token).
	clusterWide
	// anywhere: in any namespace (reads of kinds and their schemas).
	anywhere
	// authenticated: any caller the auth middleware let in, with or
	// without a role.
	authenticated
	// byBinding: the role bindings' own routes, which name a binding whose
	// namespace the handler reads (rolebindings.go): the middleware lets
	// the request through and the handler checks.
	byBinding
)

// permission is what one operation needs.
type permission struct {
	role  role
	scope scope
}

// permissions is the route-by-role table: every operation of the API by
// its operation ID (a GET's HEAD twin, "<id>-head", shares its entry). An
// operation missing from it (one registered later through API) needs the
// strongest role, a cluster-wide admin (authorize), and TestRouteByRole
// fails on it. docs/api.md lists it.
func permissions() map[string]permission {
	view, edit, operate := permission{roleViewer, inNamespace}, permission{roleEditor, inNamespace}, permission{roleOperator, inNamespace}
	kindRead, clusterRead, clusterAdmin := permission{roleViewer, anywhere}, permission{roleViewer, clusterWide}, permission{roleAdmin, clusterWide}
	open, binding := permission{noRole, authenticated}, permission{noRole, byBinding}
	return map[string]permission{
		"livez": open, "readyz": open, "get-version": open, "get-auth-config": open, "get-whoami": open,

		"list-kinds": kindRead, "list-manifests": kindRead, "get-manifest": kindRead, "get-kind-schema": kindRead, "get-kind-config": kindRead,
		"put-manifest": clusterAdmin, "delete-manifest": clusterAdmin, "put-kind-config": clusterAdmin,

		"list-resources": view, "get-resource": view, "list-resource-children": view, "get-resource-dependencies": view,
		"list-resource-events": view, "get-resource-graph": view, "get-spec-history": view, "get-resource-topology": view,
		"apply-resource": edit, "apply-resources-batch": edit, "delete-resource": edit, "reconcile-resource": edit,
		"reconcile-resources": edit, "rollback-resource": edit, "quarantine-resource": edit, "unquarantine-resource": edit,

		"list-operations": view, "get-operation": view, "invoke-operation": edit, "cancel-operation": edit,

		"list-providerconfigs": view, "get-providerconfig": view, "apply-providerconfig": edit, "delete-providerconfig": edit,
		"list-reactor-bindings": view, "get-reactor-binding": view, "apply-reactor-binding": edit, "delete-reactor-binding": edit,

		"list-endpoints": view, "get-endpoint": view, "list-endpoint-deliveries": view,
		"apply-endpoint": operate, "delete-endpoint": operate, "rotate-endpoint-secret": operate, "test-endpoint-delivery": operate,
		"list-deliveries": view, "get-delivery": view, "replay-delivery": operate,

		"list-alert-events": clusterRead, "list-alert-sinks": clusterRead, "get-alert-sink": clusterRead,
		"apply-alert-sink": clusterAdmin, "delete-alert-sink": clusterAdmin,
		"list-cluster-members": clusterRead,

		"list-audit": {roleAdmin, inNamespace},

		// A namespace's quotas are the cluster admin's: a namespace's own
		// admin who could raise them would make them no limit.
		"list-namespaces": kindRead, "get-namespace": kindRead, "put-namespace": clusterAdmin, "delete-namespace": clusterAdmin,

		"list-role-bindings": view, "get-role-binding": binding, "put-role-binding": binding, "delete-role-binding": binding,
	}
}

// describe says, for the OpenAPI document, who is refused an operation
// that needs p (read: a GET).
func (p permission) describe(read bool) string {
	var s string
	switch p.scope {
	case inNamespace:
		s = "needs the " + p.role.String() + " role in the request's namespace (cluster-wide for namespace=*)."
	case clusterWide:
		s = "needs the " + p.role.String() + " role cluster-wide."
	case anywhere:
		s = "needs a role in some namespace."
	case authenticated:
	case byBinding:
		s = "needs the role stated above in the binding's namespace (cluster-wide for a cluster-wide binding)."
	}
	if !read {
		s += " A read token is refused every write."
	}
	return strings.TrimSpace(s)
}

// The fiber-only routes' permissions (they are not huma operations).
var (
	eventStreamPermission = permission{roleViewer, inNamespace}
	metricsPermission     = permission{roleViewer, clusterWide}
)

// grants are the roles one caller holds: cluster-wide, and per namespace.
type grants struct {
	cluster role
	ns      map[string]role
}

// in is the caller's role in namespace ns (store.AllNamespaces: cluster-wide).
func (g grants) in(ns string) role {
	if ns == store.AllNamespaces {
		return g.cluster
	}
	return max(g.cluster, g.ns[ns])
}

// anywhere is the caller's strongest role in any namespace.
func (g grants) anywhere() role {
	r := g.cluster
	for _, n := range g.ns {
		r = max(r, n)
	}
	return r
}

// add grants what b grants.
func (g *grants) add(b store.RoleBinding) {
	r := parseRole(b.Role)
	if b.ClusterWide {
		g.cluster = max(g.cluster, r)
		return
	}
	if g.ns == nil {
		g.ns = map[string]role{}
	}
	g.ns[b.Namespace] = max(g.ns[b.Namespace], r)
}

// bindingCacheTTL is how long the API trusts the role bindings it read: a
// binding written through this process takes effect at its next request
// (the write empties the cache); one written through another process, by
// then.
const bindingCacheTTL = 2 * time.Second

// bindingCache holds every role binding, read at most once per
// bindingCacheTTL, so that a request checks its caller's roles without a
// query.
type bindingCache struct {
	st      *store.Store
	ttl     time.Duration // bindingCacheTTL
	timeout time.Duration // of one read of the table

	mu      sync.Mutex
	at      time.Time
	byUser  map[string][]store.RoleBinding // nil: not read, or emptied
	byGroup map[string][]store.RoleBinding
}

// bindingsOf returns the bindings that name the user subject or any of
// groups, reading the table when the cache is empty or older than c.ttl.
// The read runs outside the request's context: under a dry run, that
// context is the dry run's transaction (store.DryRun), and the cache holds
// what is committed.
func (c *bindingCache) bindingsOf(subject string, groups []string) ([]store.RoleBinding, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byUser == nil || time.Since(c.at) >= c.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		defer cancel()
		at := time.Now()
		all, err := c.st.ListRoleBindings(ctx, store.RoleBindingFilter{})
		if err != nil {
			return nil, err
		}
		c.at, c.byUser, c.byGroup = at, map[string][]store.RoleBinding{}, map[string][]store.RoleBinding{}
		for _, b := range all {
			if b.User != "" {
				c.byUser[b.User] = append(c.byUser[b.User], b)
			} else {
				c.byGroup[b.Group] = append(c.byGroup[b.Group], b)
			}
		}
	}
	out := slices.Clone(c.byUser[subject])
	for _, g := range groups {
		out = append(out, c.byGroup[g]...)
	}
	return out, nil
}

// invalidate empties the cache: the next request reads the table.
func (c *bindingCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byUser, c.byGroup = nil, nil
}

// RoleBindingsOf returns the role bindings that grant the caller of ctx
// (the principal the auth middleware named) a role: those naming its
// subject or any of its groups, by name. Static tokens and the anonymous
// caller of an open API hold their roles without bindings and get none.
// GET /auth/whoami shows them.
func (s *Server) RoleBindingsOf(ctx context.Context) ([]store.RoleBinding, error) {
	p := PrincipalFrom(ctx)
	if p.Anonymous || p.TokenName != "" {
		return []store.RoleBinding{}, nil
	}
	out, err := s.bindings.bindingsOf(p.Subject, p.Groups)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b store.RoleBinding) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b store.RoleBinding) bool { return a.Name == b.Name }), nil
}

// grantsOf returns the roles of the caller of ctx: a static admin token
// and the anonymous caller of an open API are cluster-wide admins, a
// static read token a cluster-wide viewer, and anyone else holds what its
// bindings grant. An anonymous caller of an API with authentication (a
// route the auth middleware let through unnamed) holds no role.
func (s *Server) grantsOf(ctx context.Context) (grants, error) {
	p := PrincipalFrom(ctx)
	switch {
	case p.Anonymous && s.auth.enabled():
		return grants{}, nil
	case p.Anonymous:
		return grants{cluster: roleAdmin}, nil
	case p.TokenName != "":
		return grants{cluster: staticRole(p.TokenName)}, nil
	}
	bs, err := s.RoleBindingsOf(ctx)
	if err != nil {
		return grants{}, err
	}
	var g grants
	for _, b := range bs {
		g.add(b)
	}
	return g, nil
}

// require returns nil when the caller of ctx holds role r in namespace ns
// ("" for cluster-wide, store.AllNamespaces for a list of every namespace), else
// the 403 naming the role and where it is needed. loc names the request's
// part that named ns, for the problem's errors.
func (s *Server) require(ctx context.Context, r role, ns, loc string) *Problem {
	g, err := s.grantsOf(ctx)
	if err != nil {
		return s.problemFor(ctx, err, problemOpts{})
	}
	where, held := "cluster-wide", g.cluster
	if ns != "" {
		where, held = fmt.Sprintf("in namespace %q", ns), g.in(ns)
		if ns == store.AllNamespaces {
			where = fmt.Sprintf("cluster-wide (namespace %q is every namespace)", ns)
		}
	}
	if held >= r {
		return nil
	}
	p := newProblem(http.StatusForbidden, typeForbidden,
		fmt.Sprintf("this needs the %s role %s; %s holds %s there", r, where, PrincipalFrom(ctx).Subject, held))
	if ns != "" {
		p.Errors = []ProblemError{{Location: loc, Message: "needs the " + r.String() + " role", Value: ns}}
	}
	return p
}

// check decides perm for the caller of ctx addressing namespace ns.
func (s *Server) check(ctx context.Context, perm permission, ns string) *Problem {
	switch perm.scope {
	case authenticated, byBinding:
		return nil
	case clusterWide:
		return s.require(ctx, perm.role, "", "")
	case anywhere:
		g, err := s.grantsOf(ctx)
		if err != nil {
			return s.problemFor(ctx, err, problemOpts{})
		}
		if g.anywhere() >= perm.role {
			return nil
		}
		return newProblem(http.StatusForbidden, typeForbidden, fmt.Sprintf(
			"this needs the %s role in some namespace; %s holds no role anywhere", perm.role, PrincipalFrom(ctx).Subject))
	}
	return s.require(ctx, perm.role, ns, "query.namespace")
}

// requestNamespace is the namespace a request addresses: its namespace
// query parameter, read from the raw query so that every route reads it
// alike, or store.DefaultNamespace.
func requestNamespace(c *fiber.Ctx) string {
	return cmp.Or(c.Query("namespace"), store.DefaultNamespace)
}

// permissionOf is operation id's entry in perms; an operation missing
// from it needs a cluster-wide admin. A GET's HEAD twin takes the GET's.
func permissionOf(perms map[string]permission, id string) permission {
	if p, ok := perms[strings.TrimSuffix(id, "-head")]; ok {
		return p
	}
	return permission{roleAdmin, clusterWide}
}

// authorize is the huma middleware that enforces the route-by-role table
// (permissions) on every operation, before its handler reads the body:
// a refusal is a 403 and writes nothing.
func (s *Server) authorize(ctx huma.Context, next func(huma.Context)) {
	c := humafiber.Unwrap(ctx)
	if p := s.check(c.UserContext(), permissionOf(s.perms, ctx.Operation().OperationID), requestNamespace(c)); p != nil {
		_ = writeProblem(c, p)
		return
	}
	next(ctx)
}

// guard is authorize for a Fiber route that is not a huma operation.
func (s *Server) guard(perm permission) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if p := s.check(c.UserContext(), perm, requestNamespace(c)); p != nil {
			return writeProblem(c, p)
		}
		return c.Next()
	}
}
