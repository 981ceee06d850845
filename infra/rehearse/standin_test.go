package rehearse

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
)

// A template is a CloudFormation template as decoded JSON.
type template map[string]any

func (tm template) section(name string) map[string]any {
	m, _ := tm[name].(map[string]any)
	return m
}

// resources returns the template's resources by logical ID.
func (tm template) resources() map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range tm.section("Resources") {
		out[id], _ = r.(map[string]any)
	}
	return out
}

func resType(r map[string]any) string { s, _ := r["Type"].(string); return s }

func props(r map[string]any) map[string]any { p, _ := r["Properties"].(map[string]any); return p }

// emulatedTypes asks moto which of the template's resource types its
// CloudFormation creates: one probe stack per type, holding one resource of
// it with no properties. moto skips a type it has no model for (the stack
// completes without the resource); for a type it models, it either creates
// the resource or refuses the missing properties.
func emulatedTypes(t *testing.T, cf *cloudformation.Client, types []string) map[string]bool {
	t.Helper()
	ctx := context.Background()
	out := map[string]bool{}
	for i, typ := range types {
		name := fmt.Sprintf("probe-%d", i)
		body, _ := json.Marshal(template{"Resources": map[string]any{"R": map[string]any{"Type": typ}}})
		if _, err := cf.CreateStack(ctx, &cloudformation.CreateStackInput{StackName: aws.String(name), TemplateBody: aws.String(string(body))}); err != nil {
			out[typ] = true
			continue
		}
		res, err := cf.ListStackResources(ctx, &cloudformation.ListStackResourcesInput{StackName: aws.String(name)})
		if err != nil {
			t.Fatalf("probe %s: %v", typ, err)
		}
		for _, r := range res.StackResourceSummaries {
			out[typ] = out[typ] || aws.ToString(r.LogicalResourceId) == "R"
		}
		if _, err := cf.DeleteStack(ctx, &cloudformation.DeleteStackInput{StackName: aws.String(name)}); err != nil {
			t.Fatalf("delete probe %s: %v", typ, err)
		}
	}
	return out
}

// motoCannot says why moto cannot create r although it models r's type, or
// "" when it can.
func motoCannot(r map[string]any) string {
	typ := resType(r)
	switch {
	case strings.HasPrefix(typ, "Custom::"):
		return "moto runs a custom resource's handler only in Docker"
	case typ == "AWS::RDS::DBInstance" && props(r)["DBClusterIdentifier"] != nil:
		return "moto's DBInstance model knows no Aurora engine"
	}
	return ""
}

// A leftOut resource is in the template but not in what moto deploys.
type leftOut struct{ id, typ, why string }

// standIn returns tm without the resources moto cannot create, each Ref or
// Fn::GetAtt on one of them (in Fn::Sub too) replaced by a placeholder: an
// ARN-shaped string naming the logical ID (and attribute), or 5432 for an
// attribute named …Port. DependsOn entries on them are dropped. A resource
// without Properties gets empty ones.
func standIn(tm template, emulated map[string]bool) (template, []leftOut) {
	gone := map[string]bool{}
	var out []leftOut
	for id, r := range tm.resources() {
		why := motoCannot(r)
		if why == "" && !emulated[resType(r)] {
			why = "moto's CloudFormation has no model for the type"
		}
		if why != "" {
			gone[id] = true
			out = append(out, leftOut{id, resType(r), why})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].typ+out[i].id < out[j].typ+out[j].id })
	placeholder := func(id, attr string) string {
		if strings.HasSuffix(attr, "Port") {
			return "5432"
		}
		s := fmt.Sprintf("arn:aws:rehearsal:%s:%s:%s", region, account, id)
		if attr != "" {
			s += "/" + attr
		}
		return s
	}
	subVar := regexp.MustCompile(`\$\{([A-Za-z0-9]+)(?:\.([A-Za-z0-9.]+))?\}`)
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			if len(v) == 1 {
				if ref, ok := v["Ref"].(string); ok && gone[ref] {
					return placeholder(ref, "")
				}
				if ga, ok := v["Fn::GetAtt"]; ok {
					var parts []string
					switch ga := ga.(type) {
					case string:
						parts = strings.SplitN(ga, ".", 2)
					case []any:
						for _, p := range ga {
							s, _ := p.(string)
							parts = append(parts, s)
						}
					}
					if len(parts) == 2 && gone[parts[0]] {
						return placeholder(parts[0], parts[1])
					}
				}
				if sub, ok := v["Fn::Sub"]; ok {
					replace := func(s string) string {
						return subVar.ReplaceAllStringFunc(s, func(m string) string {
							g := subVar.FindStringSubmatch(m)
							if gone[g[1]] {
								return placeholder(g[1], g[2])
							}
							return m
						})
					}
					switch sub := sub.(type) {
					case string:
						return map[string]any{"Fn::Sub": replace(sub)}
					case []any:
						if len(sub) == 2 {
							s, _ := sub[0].(string)
							return map[string]any{"Fn::Sub": []any{replace(s), walk(sub[1])}}
						}
					}
				}
			}
			m := map[string]any{}
			for k, x := range v {
				m[k] = walk(x)
			}
			return m
		case []any:
			l := make([]any, len(v))
			for i, x := range v {
				l[i] = walk(x)
			}
			return l
		}
		return v
	}
	res := map[string]any{}
	for id, r := range tm.resources() {
		if gone[id] {
			continue
		}
		r = walk(r).(map[string]any)
		// moto adds an empty Properties to a resource without one as it
		// parses, then sees that resource as changed by every update and
		// replaces it (a cluster under a new name, its services lost).
		if _, ok := r["Properties"]; !ok {
			r["Properties"] = map[string]any{}
		}
		if dep, ok := r["DependsOn"]; ok {
			var keep []any
			switch dep := dep.(type) {
			case string:
				if !gone[dep] {
					keep = append(keep, dep)
				}
			case []any:
				for _, d := range dep {
					if s, _ := d.(string); !gone[s] {
						keep = append(keep, d)
					}
				}
			}
			if len(keep) == 0 {
				delete(r, "DependsOn")
			} else {
				r["DependsOn"] = keep
			}
		}
		res[id] = r
	}
	cp := template{}
	for k, v := range tm {
		cp[k] = v
	}
	cp["Resources"] = res
	if o, ok := tm["Outputs"]; ok {
		cp["Outputs"] = walk(o)
	}
	return cp, out
}
