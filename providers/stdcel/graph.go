package stdcel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/ext"

	"github.com/convergeplane/converge/webhooksdk"
)

// Expression cost budgets, in cel-go cost units, per expression.
const (
	DefaultCostLimit = 100_000
	MaxCostLimit     = 10_000_000
)

// Config is the provider config: the resource graph.
type Config struct {
	// CostLimit is each expression's cost budget (default DefaultCostLimit).
	CostLimit uint64 `json:"cost_limit,omitempty"`
	// Resources are the graph's nodes, in any order.
	Resources []Resource `json:"resources"`
}

// Resource is one node of the graph: a child template and when it exists and is ready.
type Resource struct {
	ID          string   `json:"id"`
	IncludeWhen []string `json:"includeWhen,omitempty"`
	ReadyWhen   []string `json:"readyWhen,omitempty"`
	Template    Template `json:"template"`
}

// Template is a child's kind and its templated name, labels and spec.
type Template struct {
	Kind        string            `json:"kind"`
	KindVersion int               `json:"kind_version"`
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Spec        json.RawMessage   `json:"spec,omitempty"`
}

// errNoGraph is an absent graph: transient, since the config may not have propagated.
var errNoGraph = errors.New("config.resources: no resource graph in the provider config")

var idPattern = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// graph is a compiled config: nodes in dependency order, every expression checked.
type graph struct {
	nodes []*node // dependencies before dependents
	byID  map[string]*node
}

type node struct {
	id      string
	where   string // "config.resources[i]"
	kind    string
	version int
	name    *template
	labels  map[string]*template
	spec    *template
	include []*expr
	ready   []*expr
	deps    []*node                            // every resource referenced, in config order
	flows   map[string][]*webhooksdk.ValueFlow // status dependency id -> its value flows
	statDep []*node                            // resources whose status is referenced
}

// expr is one compiled CEL expression.
type expr struct {
	where string // the config field holding it
	src   string
	prg   cel.Program
	// flow is set for a whole-value "${dep.status.path}": it is not evaluated at
	// compose time but flows from dep's status.
	flow  *webhooksdk.ValueFlow
	out   *cel.Type
	limit uint64
	// path is set for a plain field path (a.b.c), the commonest expression, which
	// is looked up without CEL: parsing dominates compile time, and a lookup is
	// bounded by its length.
	path []string
}

// Validate compiles config and reports the first problem, naming the field or the
// cycle; nil means the graph would compose. It needs no server and no schema, so it
// can run wherever a config is applied.
func Validate(config []byte) error {
	_, err := compile(config)
	return err
}

// compile decodes, checks and compiles a config.
func compile(raw []byte) (*graph, error) {
	var cfg Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(cfg.Resources) == 0 {
		return nil, errNoGraph
	}
	limit := cfg.CostLimit
	if limit == 0 {
		limit = DefaultCostLimit
	}
	if limit > MaxCostLimit {
		return nil, fmt.Errorf("config.cost_limit: %d is over the maximum %d", limit, MaxCostLimit)
	}
	g := &graph{byID: map[string]*node{}}
	opts := []cel.EnvOption{ext.Strings(), cel.Variable("schema", cel.MapType(cel.StringType, cel.DynType))}
	for i, r := range cfg.Resources {
		where := fmt.Sprintf("config.resources[%d]", i)
		if err := checkResource(r, where, g.byID); err != nil {
			return nil, err
		}
		n := &node{id: r.ID, where: where, kind: r.Template.Kind, version: r.Template.KindVersion}
		g.byID[r.ID] = n
		g.nodes = append(g.nodes, n)
		opts = append(opts, cel.Variable(r.ID, cel.MapType(cel.StringType, cel.DynType)))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("config: CEL environment: %w", err)
	}
	c := &compiler{env: env, g: g, limit: limit}
	for i, r := range cfg.Resources {
		if err := c.resource(g.nodes[i], r); err != nil {
			return nil, err
		}
	}
	order, err := topoSort(g.nodes)
	if err != nil {
		return nil, err
	}
	g.nodes = order
	return g, nil
}

func checkResource(r Resource, where string, seen map[string]*node) error {
	switch {
	case !idPattern.MatchString(r.ID):
		return fmt.Errorf("%s.id: %q is not an identifier (letters, digits, _)", where, r.ID)
	case r.ID == "schema":
		return fmt.Errorf("%s.id: %q is reserved for the root's inputs", where, r.ID)
	case seen[r.ID] != nil:
		return fmt.Errorf("%s.id: %q is already %s's", where, r.ID, seen[r.ID].where)
	case r.Template.Kind == "":
		return fmt.Errorf("%s.template.kind: required", where)
	case r.Template.KindVersion < 1 || r.Template.KindVersion > webhooksdk.MaxKindVersion:
		return fmt.Errorf("%s.template.kind_version: %d outside 1..%d (it is required)", where, r.Template.KindVersion, webhooksdk.MaxKindVersion)
	case r.Template.Name == "":
		return fmt.Errorf("%s.template.name: required", where)
	}
	return nil
}

// compiler compiles one graph's expressions in one CEL environment.
type compiler struct {
	env   *cel.Env
	g     *graph
	limit uint64
}

// use is how an expression may reference the graph.
type use int

const (
	useSpec    use = iota // a spec field: status only as a whole-value field copy
	useName               // a name or label: no status
	useInclude            // includeWhen: schema only
	useReady              // readyWhen: schema and the resource itself
)

func (c *compiler) resource(n *node, r Resource) error {
	var err error
	if n.name, err = c.template(n, r.Template.Name, n.where+".template.name", "", useName); err != nil {
		return err
	}
	if len(r.Template.Labels) > 0 {
		n.labels = map[string]*template{}
		for k, v := range r.Template.Labels {
			if n.labels[k], err = c.template(n, v, n.where+".template.labels."+k, "", useName); err != nil {
				return err
			}
		}
	}
	spec, err := decodeSpec(r.Template.Spec)
	if err != nil {
		return fmt.Errorf("%s.template.spec: %w", n.where, err)
	}
	if _, ok := spec.(map[string]any); !ok {
		return fmt.Errorf("%s.template.spec: not a JSON object", n.where)
	}
	if n.spec, err = c.template(n, spec, n.where+".template.spec", "", useSpec); err != nil {
		return err
	}
	for i, s := range r.IncludeWhen {
		e, err := c.condition(n, s, fmt.Sprintf("%s.includeWhen[%d]", n.where, i), useInclude)
		if err != nil {
			return err
		}
		n.include = append(n.include, e)
	}
	for i, s := range r.ReadyWhen {
		e, err := c.condition(n, s, fmt.Sprintf("%s.readyWhen[%d]", n.where, i), useReady)
		if err != nil {
			return err
		}
		n.ready = append(n.ready, e)
	}
	return nil
}

// template compiles a JSON value at where; ptr is its JSON Pointer in the spec.
func (c *compiler) template(n *node, v any, where, ptr string, u use) (*template, error) {
	switch v := v.(type) {
	case map[string]any:
		t := &template{kind: tmplObject, keys: sortedKeys(v), obj: map[string]*template{}}
		for _, k := range t.keys {
			e, err := c.template(n, v[k], where+"."+k, ptr+"/"+pointerToken(k), u)
			if err != nil {
				return nil, err
			}
			t.obj[k] = e
		}
		return t, nil
	case []any:
		t := &template{kind: tmplList}
		for i, e := range v {
			et, err := c.template(n, e, fmt.Sprintf("%s[%d]", where, i), fmt.Sprintf("%s/%d", ptr, i), u)
			if err != nil {
				return nil, err
			}
			t.list = append(t.list, et)
		}
		return t, nil
	case string:
		texts, srcs, err := splitExprs(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if len(srcs) == 0 {
			return &template{kind: tmplLit, lit: v}, nil
		}
		whole := len(srcs) == 1 && texts[0] == "" && texts[1] == ""
		t := &template{kind: tmplInterp}
		for i, src := range srcs {
			e, err := c.expr(n, src, where, u, whole)
			if err != nil {
				return nil, err
			}
			if e.flow != nil {
				e.flow.DependentField = ptr
			}
			if whole {
				return &template{kind: tmplExpr, expr: e}, nil
			}
			t.parts = append(t.parts, part{text: texts[i]}, part{expr: e})
		}
		t.parts = append(t.parts, part{text: texts[len(texts)-1]})
		return t, nil
	}
	return &template{kind: tmplLit, lit: v}, nil
}

// condition compiles an includeWhen or readyWhen entry: one whole "${...}" boolean.
func (c *compiler) condition(n *node, s, where string, u use) (*expr, error) {
	texts, srcs, err := splitExprs(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if len(srcs) != 1 || texts[0] != "" || texts[1] != "" {
		return nil, fmt.Errorf("%s: %q must be one whole \"${...}\" expression", where, s)
	}
	e, err := c.expr(n, srcs[0], where, u, true)
	if err != nil {
		return nil, err
	}
	if e.out != cel.BoolType && e.out != cel.DynType {
		return nil, fmt.Errorf("%s: ${%s} is %s, not a bool", where, srcs[0], e.out)
	}
	return e, nil
}

// expr compiles src, records the dependencies it reads, checks them against u and the
// expression's static cost against the budget. whole says src is a whole-value
// template, the one place a status read can be (a value flow).
func (c *compiler) expr(n *node, src, where string, u use, whole bool) (*expr, error) {
	if path := plainPath(src); path != nil && (path[0] == "schema" || c.g.byID[path[0]] != nil) {
		return c.pathExpr(n, src, where, u, whole, path)
	}
	checked, iss := c.env.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%s: ${%s}: %w", where, src, iss.Err())
	}
	e := &expr{where: where, src: src, out: checked.OutputType(), limit: c.limit}
	root := checked.NativeRep().Expr()
	var problem error
	ast.PreOrderVisit(root, ast.NewExprVisitor(func(x ast.Expr) {
		if problem != nil {
			return
		}
		if x.Kind() == ast.IdentKind {
			problem = c.ref(n, x.AsIdent(), u)
			return
		}
		// A plain status copy took the path route; any other status read computes
		// on a value the composer does not have.
		if id, field := selected(x); field == "status" && c.g.byID[id] != nil && u != useReady {
			problem = fmt.Errorf("reads %s.status in a computation; only a whole-value spec field \"${%s.status.<field>}\" can read it (as a value flow)", id, id)
		}
	}))
	if problem != nil {
		return nil, fmt.Errorf("%s: ${%s}: %w", where, src, problem)
	}
	est, err := c.env.EstimateCost(checked, zeroEstimator{})
	if err != nil {
		return nil, fmt.Errorf("%s: ${%s}: cost estimate: %w", where, src, err)
	}
	if est.Min > c.limit {
		return nil, fmt.Errorf("%s: ${%s}: costs at least %d, over the budget of %d", where, src, est.Min, c.limit)
	}
	// The interrupt check lets a cancelled task stop a long comprehension.
	if e.prg, err = c.env.Program(checked, cel.CostLimit(c.limit), cel.InterruptCheckFrequency(100)); err != nil {
		return nil, fmt.Errorf("%s: ${%s}: %w", where, src, err)
	}
	return e, nil
}

// ref checks one identifier an expression of n reads and records the dependency.
func (c *compiler) ref(n *node, name string, u use) error {
	dep := c.g.byID[name]
	if dep == nil {
		return nil // schema, or a comprehension variable
	}
	switch {
	case u == useInclude:
		return fmt.Errorf("reads %s; includeWhen may read only schema", name)
	case u == useReady && dep != n:
		return fmt.Errorf("reads %s; readyWhen may read only schema and %s itself", name, n.id)
	case u == useReady:
		return nil
	}
	if !slices.Contains(n.deps, dep) {
		n.deps = append(n.deps, dep)
	}
	return nil
}

// selected returns (ident, field) when x selects a field of an identifier.
func selected(x ast.Expr) (string, string) {
	if x.Kind() != ast.SelectKind {
		return "", ""
	}
	s := x.AsSelect()
	if s.Operand().Kind() != ast.IdentKind {
		return "", ""
	}
	return s.Operand().AsIdent(), s.FieldName()
}

// zeroEstimator leaves every size and call to cel-go's defaults, so the estimate's
// minimum is what any input costs at least.
type zeroEstimator struct{}

func (zeroEstimator) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }
func (zeroEstimator) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

// topoSort orders nodes dependencies first, or names a cycle.
func topoSort(nodes []*node) ([]*node, error) {
	const (
		onPath = iota + 1 // zero is unseen
		done
	)
	state := map[*node]int{}
	var order, path []*node
	var visit func(n *node) error
	visit = func(n *node) error {
		switch state[n] {
		case done:
			return nil
		case onPath:
			i := slices.Index(path, n)
			ids := make([]string, 0, len(path)-i+1)
			for _, p := range path[i:] {
				ids = append(ids, p.id)
			}
			return fmt.Errorf("cycle: %s -> %s", strings.Join(ids, " -> "), n.id)
		}
		state[n] = onPath
		path = append(path, n)
		for _, d := range n.deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		order = append(order, n)
		return nil
	}
	for _, n := range nodes {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return order, nil
}

var (
	pathPattern = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*(\.[a-zA-Z_][a-zA-Z0-9_]*)+$`)
	celReserved = map[string]bool{"true": true, "false": true, "null": true, "in": true, "as": true, "break": true,
		"const": true, "continue": true, "else": true, "for": true, "function": true, "if": true, "import": true,
		"let": true, "loop": true, "package": true, "namespace": true, "return": true, "var": true, "void": true, "while": true}
)

// plainPath splits src when it is a plain field path such as vpc.status.vpc_id.
func plainPath(src string) []string {
	if !pathPattern.MatchString(src) {
		return nil
	}
	path := strings.Split(src, ".")
	for _, f := range path {
		if celReserved[f] {
			return nil
		}
	}
	return path
}

// pathExpr is expr for a plain field path, under the same reference rules.
func (c *compiler) pathExpr(n *node, src, where string, u use, whole bool, path []string) (*expr, error) {
	e := &expr{where: where, src: src, out: cel.DynType, limit: c.limit, path: path}
	fail := func(err error) (*expr, error) { return nil, fmt.Errorf("%s: ${%s}: %w", where, src, err) }
	if err := c.ref(n, path[0], u); err != nil {
		return fail(err)
	}
	dep := c.g.byID[path[0]]
	if dep == nil || path[1] != "status" || u == useReady {
		return e, nil
	}
	if u != useSpec || !whole {
		return fail(fmt.Errorf("reads %s.status outside a whole-value spec field; only \"${%s.status.<field>}\" can read it (as a value flow)", dep.id, dep.id))
	}
	if len(path) < 3 {
		return fail(fmt.Errorf("copies all of %s.status; a value flow copies one field, ${%s.status.<field>}", dep.id, dep.id))
	}
	var ptr strings.Builder
	for _, f := range path[2:] {
		ptr.WriteString("/" + pointerToken(f))
	}
	e.flow = &webhooksdk.ValueFlow{SourceField: ptr.String()}
	c.addFlow(n, dep, e.flow)
	return e, nil
}

// addFlow records a value flow from dep's status into n's spec.
func (c *compiler) addFlow(n, dep *node, f *webhooksdk.ValueFlow) {
	if n.flows == nil {
		n.flows = map[string][]*webhooksdk.ValueFlow{}
	}
	if len(n.flows[dep.id]) == 0 {
		n.statDep = append(n.statDep, dep)
	}
	n.flows[dep.id] = append(n.flows[dep.id], f)
}
