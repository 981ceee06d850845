package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/convergeplane/converge/webhooksdk"
)

// BOMSpec is classicbom/1's spec: the organisation's functional domains and
// their service teams.
type BOMSpec struct {
	Domains []Domain `json:"domains"`
}

// Domain is one functional domain.
type Domain struct {
	Name string `json:"name"`
	// Networking gives the domain a transit gateway its teams' VPCs route
	// to; nil means true.
	Networking *bool    `json:"networking,omitempty"`
	Teams      []string `json:"teams"`
}

func (d Domain) networked() bool { return d.Networking == nil || *d.Networking }

// placeholderAccount satisfies vpc's spec schema (exactly 12 characters)
// until the account's real id flows in: the core validates a child's spec as
// the composer emits it, and runs the vpc only after the flow replaced it.
const placeholderAccount = "000000000000"

type bom struct{ o Options }

func (*bom) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "classicbom", Version: 1}
}

func (b *bom) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	switch req.Reaction {
	case "compose":
		return compose(req)
	case "rollup":
		return rollup(req)
	case "teardown":
		return teardown(ctx, b.o, req)
	}
	return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("classicbom has no reaction %q", req.Reaction))
}

// compose fans the BOM out. Names are derived from the BOM's, the domain's
// and the team's names only, so a recompose after a team is added or removed
// leaves every other child's identity and spec as it was.
func compose(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec BOMSpec
	if err := decodeSpec(req, &spec); err != nil {
		return webhooksdk.Outcome{}, err
	}
	var out webhooksdk.Outcome
	child := func(kind string, version int, name string, labels map[string]string, spec any) error {
		s, err := json.Marshal(spec)
		if err != nil {
			return fmt.Errorf("encode %s/%s spec: %w", kind, name, err)
		}
		out.Children = append(out.Children, webhooksdk.Child{Kind: kind, KindVersion: version, Name: name, Labels: labels, Spec: s})
		return nil
	}
	edge := func(dependent, dependency webhooksdk.Ref, field string) {
		out.Edges = append(out.Edges, webhooksdk.Edge{Dependent: dependent, Dependency: dependency,
			Values: []webhooksdk.ValueFlow{{DependentField: "/" + field, SourceField: "/" + field}}})
	}
	root := req.Resource.Name
	teams := 0
	for _, d := range spec.Domains {
		base := root + "-" + d.Name
		var tgwRef webhooksdk.Ref
		if d.networked() {
			host := webhooksdk.Ref{Kind: "account", Name: base + "-tgw-host"}
			tgwRef = webhooksdk.Ref{Kind: "tgw", Name: base}
			labels := map[string]string{"bom": root, "domain": d.Name, "role": "tgw-host"}
			if err := child("account", 1, host.Name, labels, accountSpec{TeamName: d.Name + "-tgw-host"}); err != nil {
				return out, err
			}
			if err := child("tgw", 1, tgwRef.Name, labels, tgwSpec{Name: base}); err != nil {
				return out, err
			}
			edge(tgwRef, host, "account_id")
		}
		for _, team := range d.Teams {
			teams++
			name := base + "-" + team
			labels := map[string]string{"bom": root, "domain": d.Name, "team": team}
			acct := webhooksdk.Ref{Kind: "account", Name: name}
			vpcRef := webhooksdk.Ref{Kind: "vpc", Name: name}
			if err := child("account", 1, acct.Name, labels, accountSpec{TeamName: team}); err != nil {
				return out, err
			}
			if err := child("vpc", 1, vpcRef.Name, labels, vpcSpec{AccountID: placeholderAccount, CIDR: cidr(name)}); err != nil {
				return out, err
			}
			edge(vpcRef, acct, "account_id")
			if !d.networked() {
				continue
			}
			rt := webhooksdk.Ref{Kind: "route", Name: name}
			if err := child("route", 1, rt.Name, labels, routeSpec{}); err != nil {
				return out, err
			}
			edge(rt, vpcRef, "vpc_id")
			edge(rt, tgwRef, "tgw_id")
		}
	}
	st, err := status(map[string]any{"domains": len(spec.Domains), "teams": teams, "children": len(out.Children)})
	out.Status = st.Status
	return out, err
}

// cidr is a /24 in 10.0.0.0/8 derived from the team's name: stable across
// recomposes (collisions are harmless in a simulation).
func cidr(name string) string {
	h := hash(name)
	return fmt.Sprintf("10.%d.%d.0/24", h>>8&0xff, h&0xff)
}

// maxNotReady bounds the not_ready list in the rollup: the large BOM has
// thousands of children, and the status should stay readable.
const maxNotReady = 10

type tally struct {
	Ready int `json:"ready"`
	Total int `json:"total"`
}

// rollup folds the settled subtree into the root's status, with a Ready
// condition that is False while any child is not Ready.
func rollup(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec BOMSpec
	if err := decodeSpec(req, &spec); err != nil {
		return webhooksdk.Outcome{}, err
	}
	teams := 0
	for _, d := range spec.Domains {
		teams += len(d.Teams)
	}
	byKind := map[string]*tally{}
	ready := 0
	var notReady []string
	for _, d := range req.Descendants {
		t := byKind[d.Kind]
		if t == nil {
			t = &tally{}
			byKind[d.Kind] = t
		}
		t.Total++
		if d.Phase == "Ready" {
			t.Ready++
			ready++
		} else if len(notReady) < maxNotReady {
			notReady = append(notReady, d.Kind+"/"+d.Name+" is "+d.Phase)
		}
	}
	sort.Strings(notReady)
	out, err := status(map[string]any{"domains": len(spec.Domains), "teams": teams, "children": len(req.Descendants),
		"ready": ready, "total": len(req.Descendants), "by_kind": byKind, "not_ready": notReady})
	if err != nil {
		return out, err
	}
	cond := webhooksdk.Condition{Type: "Ready", Status: "True", Reason: "AllChildrenReady"}
	if ready < len(req.Descendants) {
		cond = webhooksdk.Condition{Type: "Ready", Status: "False", Reason: "ChildrenNotReady",
			Message: fmt.Sprintf("%d of %d children ready", ready, len(req.Descendants))}
	}
	out.Conditions = []webhooksdk.Condition{cond}
	return out, nil
}
