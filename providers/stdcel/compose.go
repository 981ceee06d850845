package stdcel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"cel.dev/cel-go/interpreter"

	"github.com/convergeplane/converge/webhooksdk"
)

// instance is a graph evaluated for one root: its included children, in dependency
// order, and the edges between them.
type instance struct {
	nodes    []*node
	children []webhooksdk.Child
	edges    []webhooksdk.Edge
	excluded []string
	vars     map[string]any
}

// compose evaluates g for root. Errors are terminal unless ctx ended.
func (g *graph) compose(ctx context.Context, root webhooksdk.Resource) (*instance, error) {
	spec, err := decodeSpec(root.Spec)
	if err != nil {
		return nil, fmt.Errorf("resource spec: %w", err)
	}
	in := &instance{vars: map[string]any{"schema": map[string]any{
		"spec": toCEL(spec), "metadata": map[string]any{"name": root.Name}}}}
	refs := map[string]webhooksdk.Ref{}
	for _, n := range g.nodes {
		ok, err := n.included(ctx, in.vars, refs)
		if err != nil {
			return nil, err
		}
		if !ok {
			in.excluded = append(in.excluded, n.id)
			continue
		}
		child, err := n.child(ctx, in.vars)
		if err != nil {
			return nil, err
		}
		refs[n.id] = webhooksdk.Ref{Kind: child.Kind, Name: child.Name}
		for _, dep := range n.statDep {
			e := webhooksdk.Edge{Dependent: refs[n.id], Dependency: refs[dep.id]}
			for _, f := range n.flows[dep.id] {
				e.Values = append(e.Values, *f)
			}
			in.edges = append(in.edges, e)
		}
		in.nodes = append(in.nodes, n)
		in.children = append(in.children, child)
	}
	return in, nil
}

// included reports whether n is in the instance: every resource it reads is, and every
// includeWhen holds.
func (n *node) included(ctx context.Context, vars map[string]any, refs map[string]webhooksdk.Ref) (bool, error) {
	for _, d := range n.deps {
		if _, ok := refs[d.id]; !ok {
			return false, nil
		}
	}
	for _, e := range n.include {
		v, err := e.eval(ctx, vars)
		if err != nil {
			return false, err
		}
		b, ok := v.(bool)
		if !ok {
			return false, fmt.Errorf("%s: ${%s} is %v, not a bool", e.where, e.src, v)
		}
		if !b {
			return false, nil
		}
	}
	return true, nil
}

// child renders n's template and binds its name and spec for the resources after it.
func (n *node) child(ctx context.Context, vars map[string]any) (webhooksdk.Child, error) {
	name, err := n.name.eval(ctx, vars)
	if err != nil {
		return webhooksdk.Child{}, err
	}
	c := webhooksdk.Child{Kind: n.kind, KindVersion: n.version}
	var ok bool
	if c.Name, ok = name.(string); !ok || c.Name == "" {
		return c, fmt.Errorf("%s.template.name: evaluates to %v, not a non-empty string", n.where, name)
	}
	for k, t := range n.labels {
		v, err := t.eval(ctx, vars)
		if err != nil {
			return c, err
		}
		s, ok := v.(string)
		if !ok {
			return c, fmt.Errorf("%s.template.labels.%s: evaluates to %v, not a string", n.where, k, v)
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[k] = s
	}
	spec, err := n.spec.eval(ctx, vars)
	if err != nil {
		return c, err
	}
	if c.Spec, err = json.Marshal(spec); err != nil {
		return c, fmt.Errorf("%s.template.spec: %w", n.where, err)
	}
	vars[n.id] = map[string]any{"spec": toCEL(spec), "metadata": map[string]any{"name": c.Name}}
	return c, nil
}

// eval renders t. The core fills a value-flow leaf from the dependency's status; until
// then it is left out of its object, so a child kind whose schema types the field
// still accepts the spec (in a list, where leaving out would shift the items, it is
// null).
func (t *template) eval(ctx context.Context, vars map[string]any) (any, error) {
	switch t.kind {
	case tmplExpr:
		if t.expr.flow != nil {
			return nil, nil
		}
		return t.expr.eval(ctx, vars)
	case tmplInterp:
		var b strings.Builder
		for _, p := range t.parts {
			if p.expr == nil {
				b.WriteString(p.text)
				continue
			}
			v, err := p.expr.eval(ctx, vars)
			if err != nil {
				return nil, err
			}
			s, err := scalarString(v)
			if err != nil {
				return nil, fmt.Errorf("%s: ${%s}: %w", p.expr.where, p.expr.src, err)
			}
			b.WriteString(s)
		}
		return b.String(), nil
	case tmplObject:
		m := make(map[string]any, len(t.keys))
		for _, k := range t.keys {
			if e := t.obj[k].expr; e != nil && e.flow != nil {
				continue
			}
			v, err := t.obj[k].eval(ctx, vars)
			if err != nil {
				return nil, err
			}
			m[k] = v
		}
		return m, nil
	case tmplList:
		l := make([]any, len(t.list))
		for i, e := range t.list {
			v, err := e.eval(ctx, vars)
			if err != nil {
				return nil, err
			}
			l[i] = v
		}
		return l, nil
	}
	return t.lit, nil
}

// eval runs e under its cost budget.
func (e *expr) eval(ctx context.Context, vars map[string]any) (any, error) {
	if e.path != nil {
		return e.lookup(vars)
	}
	v, _, err := e.prg.ContextEval(ctx, vars)
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		if errors.As(err, &cancelled) {
			if cancelled.Cause == interpreter.CostLimitExceeded {
				return nil, fmt.Errorf("%s: ${%s}: %w of %d", e.where, e.src, errOverBudget, e.limit)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
		return nil, fmt.Errorf("%s: ${%s}: %w", e.where, e.src, err)
	}
	out, err := fromCEL(v)
	if err != nil {
		return nil, fmt.Errorf("%s: ${%s}: %w", e.where, e.src, err)
	}
	return out, nil
}

func decodeSpec(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// errOverBudget marks an expression stopped by its cost budget.
var errOverBudget = errors.New("over its cost budget")

// rollup reports each child's readiness from the settled descendants: a child is ready
// when its phase is Ready and its readyWhen expressions hold.
func (in *instance) rollup(ctx context.Context, descendants []webhooksdk.Resource) (webhooksdk.Outcome, error) {
	byRef := make(map[webhooksdk.Ref]webhooksdk.Resource, len(descendants))
	for _, d := range descendants {
		byRef[webhooksdk.Ref{Kind: d.Kind, Name: d.Name}] = d
	}
	ready := 0
	st := rootStatus{Children: len(in.children), Ready: &ready, Excluded: in.excluded, Resources: map[string]childStatus{}}
	var notReady []string
	for i, n := range in.nodes {
		c := in.children[i]
		d, found := byRef[webhooksdk.Ref{Kind: c.Kind, Name: c.Name}]
		ok, reason, err := n.isReady(ctx, in.vars, d, found)
		if err != nil {
			return webhooksdk.Outcome{}, err
		}
		if ok {
			ready++
		} else {
			notReady = append(notReady, n.id+" ("+reason+")")
		}
		st.Resources[n.id] = childStatus{Kind: c.Kind, Name: c.Name, Ready: &ok, Reason: reason}
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("encode status: %w", err)
	}
	cond := webhooksdk.Condition{Type: "Ready", Status: "True", Reason: "AllResourcesReady",
		Message: fmt.Sprintf("%d of %d resources ready", ready, len(in.nodes))}
	if len(notReady) > 0 {
		cond.Status, cond.Reason = "False", "ResourcesNotReady"
		cond.Message += "; not ready: " + strings.Join(notReady, ", ")
	}
	return webhooksdk.Outcome{Status: raw, Conditions: []webhooksdk.Condition{cond}}, nil
}

// isReady evaluates n's readiness against its settled child d. An expression that
// cannot evaluate yet (a status field not reported) means not ready; one over its
// budget is an error.
func (n *node) isReady(ctx context.Context, vars map[string]any, d webhooksdk.Resource, found bool) (bool, string, error) {
	switch {
	case !found:
		return false, "not created yet", nil
	case d.Phase != "Ready":
		return false, "phase " + d.Phase, nil
	case len(n.ready) == 0:
		return true, "", nil
	}
	spec, err := decodeSpec(d.Spec)
	if err != nil {
		return false, "", fmt.Errorf("%s: spec of %s/%s: %w", n.where, d.Kind, d.Name, err)
	}
	status, err := decodeSpec(d.Status)
	if err != nil {
		return false, "", fmt.Errorf("%s: status of %s/%s: %w", n.where, d.Kind, d.Name, err)
	}
	vars[n.id] = map[string]any{"spec": toCEL(spec), "status": toCEL(status), "metadata": map[string]any{"name": d.Name}}
	for _, e := range n.ready {
		v, err := e.eval(ctx, vars)
		if errors.Is(err, errOverBudget) || ctx.Err() != nil {
			return false, "", err
		}
		if err != nil {
			return false, err.Error(), nil
		}
		if b, _ := v.(bool); !b {
			return false, "${" + e.src + "} is false", nil
		}
	}
	return true, "", nil
}

// lookup evaluates a plain field path, failing as CEL would on a missing key.
func (e *expr) lookup(vars map[string]any) (any, error) {
	v := vars[e.path[0]]
	for _, f := range e.path[1:] {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: ${%s}: no such key: %s (in %T)", e.where, e.src, f, v)
		}
		if v, ok = m[f]; !ok {
			return nil, fmt.Errorf("%s: ${%s}: no such key: %s", e.where, e.src, f)
		}
	}
	return v, nil
}
