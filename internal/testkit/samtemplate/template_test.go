package samtemplate

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// load reads template.yaml with its short-form intrinsics (!GetAtt, !Sub, …)
// kept as their long form ({"Fn::GetAtt": …}), as CloudFormation reads them:
// a plain unmarshal drops the tags and would let a literal string pass for a
// reference.
func load(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	v, err := value(doc.Content[0])
	if err != nil {
		t.Fatal(err)
	}
	return v.(map[string]any)
}

func value(n *yaml.Node) (any, error) {
	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i < len(n.Content); i += 2 {
			x, err := value(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = x
		}
		v = m
	case yaml.SequenceNode:
		s := []any{}
		for _, c := range n.Content {
			x, err := value(c)
			if err != nil {
				return nil, err
			}
			s = append(s, x)
		}
		v = s
	case yaml.AliasNode:
		return value(n.Alias)
	default:
		if err := n.Decode(&v); err != nil {
			return nil, err
		}
	}
	if tag := n.Tag; len(tag) > 1 && tag[0] == '!' && tag[1] != '!' {
		name := "Fn::" + tag[1:]
		if tag == "!Ref" || tag == "!Condition" {
			name = tag[1:]
		}
		if s, ok := v.(string); ok && tag == "!GetAtt" {
			// !GetAtt Res.Attr is the long form's [Res, Attr].
			if res, attr, ok := strings.Cut(s, "."); ok {
				return map[string]any{name: []any{res, attr}}, nil
			}
		}
		return map[string]any{name: v}, nil
	}
	return v, nil
}

func resource(t *testing.T, tpl map[string]any, name, typ string) map[string]any {
	t.Helper()
	r, ok := tpl["Resources"].(map[string]any)[name].(map[string]any)
	if !ok {
		t.Fatalf("no resource %s", name)
	}
	if r["Type"] != typ {
		t.Fatalf("%s is a %v, want %s", name, r["Type"], typ)
	}
	p, _ := r["Properties"].(map[string]any)
	return p
}

func list(v any) []any {
	if s, ok := v.([]any); ok {
		return s
	}
	return []any{v}
}

func TestInvokerRoleIsLeastPrivilege(t *testing.T) {
	tpl := load(t)
	role := resource(t, tpl, "InvokerRole", "AWS::IAM::Role")
	// The functions' ARNs: the role may invoke the template's functions and nothing else.
	var fnArns []any
	for name, r := range tpl["Resources"].(map[string]any) {
		if r.(map[string]any)["Type"] == "AWS::Serverless::Function" {
			fnArns = append(fnArns, map[string]any{"Fn::GetAtt": []any{name, "Arn"}})
		}
	}
	if len(fnArns) == 0 {
		t.Fatal("the template has no AWS::Serverless::Function")
	}

	var actions []string
	for _, p := range list(role["Policies"]) {
		for _, st := range list(p.(map[string]any)["PolicyDocument"].(map[string]any)["Statement"]) {
			st := st.(map[string]any)
			if st["Effect"] != "Allow" {
				continue
			}
			for _, r := range list(st["Resource"]) {
				if !slices.ContainsFunc(fnArns, func(fn any) bool { return cmp.Equal(fn, r) }) {
					t.Errorf("statement %v grants on %v, which is not a function's ARN (%v)", st["Action"], r, fnArns)
				}
			}
			if _, ok := st["NotResource"]; ok {
				t.Errorf("statement %v uses NotResource", st["Action"])
			}
			for _, a := range list(st["Action"]) {
				actions = append(actions, a.(string))
			}
		}
	}
	slices.Sort(actions)
	if want := []string{"lambda:InvokeFunction", "lambda:InvokeFunctionUrl"}; !slices.Equal(actions, want) {
		t.Errorf("invoker role allows %v, want exactly %v", actions, want)
	}
	for _, k := range []string{"ManagedPolicyArns", "PermissionsBoundary"} {
		if _, ok := role[k]; ok {
			t.Errorf("invoker role has %s: its permissions must all be in the inline policy checked here", k)
		}
	}

	// Only the principal passed as a parameter may assume it.
	trust := list(role["AssumeRolePolicyDocument"].(map[string]any)["Statement"])
	want := []any{map[string]any{
		"Effect":    "Allow",
		"Principal": map[string]any{"AWS": map[string]any{"Ref": "DispatcherPrincipalArn"}},
		"Action":    "sts:AssumeRole",
	}}
	if diff := cmp.Diff(want, trust); diff != "" {
		t.Errorf("trust policy (-want +got):\n%s", diff)
	}
	if _, ok := tpl["Parameters"].(map[string]any)["DispatcherPrincipalArn"]; !ok {
		t.Error("no DispatcherPrincipalArn parameter")
	}
}

// function returns the properties a function of tpl gets: Globals.Function's,
// each replaced by the function's own where it sets one (as SAM merges a
// property that is not a map or a list).
func function(t *testing.T, tpl map[string]any, name string) map[string]any {
	t.Helper()
	props := map[string]any{}
	if g, ok := tpl["Globals"].(map[string]any)["Function"].(map[string]any); ok {
		maps.Copy(props, g)
	}
	maps.Copy(props, resource(t, tpl, name, "AWS::Serverless::Function"))
	return props
}

func TestFunctionURLNeedsIAM(t *testing.T) {
	tpl := load(t)
	for name, r := range tpl["Resources"].(map[string]any) {
		if r.(map[string]any)["Type"] != "AWS::Serverless::Function" {
			continue
		}
		fn := function(t, tpl, name)
		if got := fn["FunctionUrlConfig"].(map[string]any)["AuthType"]; got != "AWS_IAM" {
			t.Errorf("%s: FunctionUrlConfig.AuthType = %v, want AWS_IAM", name, got)
		}
		if diff := cmp.Diff([]any{"arm64"}, fn["Architectures"]); diff != "" {
			t.Errorf("%s: Architectures (-want +got):\n%s", name, diff)
		}
	}
	fn := function(t, tpl, "QuickstartFunction")
	for k, want := range map[string]any{
		"Runtime": "provided.al2023", "Handler": "bootstrap", "CodeUri": "functions/quickstart",
	} {
		if diff := cmp.Diff(want, fn[k]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k, diff)
		}
	}
	// No resource-based policy may open the function beyond the invoker role.
	for name, r := range tpl["Resources"].(map[string]any) {
		if typ := r.(map[string]any)["Type"]; typ == "AWS::Lambda::Permission" || typ == "AWS::Lambda::Url" {
			t.Errorf("%s (%s): the function URL and its permissions come from FunctionUrlConfig only", name, typ)
		}
	}
}

func TestOutputsForEndpointRegistration(t *testing.T) {
	out := load(t)["Outputs"].(map[string]any)
	for name, want := range map[string]any{
		"FunctionArn":       map[string]any{"Fn::GetAtt": []any{"QuickstartFunction", "Arn"}},
		"FunctionUrl":       map[string]any{"Fn::GetAtt": []any{"QuickstartFunctionUrl", "FunctionUrl"}},
		"InvokerRoleArn":    map[string]any{"Fn::GetAtt": []any{"InvokerRole", "Arn"}},
		"SigningSecretArn":  map[string]any{"Ref": "SigningSecret"},
		"Region":            map[string]any{"Ref": "AWS::Region"},
		"PythonFunctionArn": map[string]any{"Fn::GetAtt": []any{"PythonProviderFunction", "Arn"}},
		"PythonFunctionUrl": map[string]any{"Fn::GetAtt": []any{"PythonProviderFunctionUrl", "FunctionUrl"}},
		"NodeFunctionArn":   map[string]any{"Fn::GetAtt": []any{"NodeProviderFunction", "Arn"}},
		"NodeFunctionUrl":   map[string]any{"Fn::GetAtt": []any{"NodeProviderFunctionUrl", "FunctionUrl"}},
		// Where to look when an invoke goes wrong.
		"FunctionLogGroup":       map[string]any{"Ref": "QuickstartLogGroup"},
		"PythonFunctionLogGroup": map[string]any{"Ref": "PythonProviderLogGroup"},
		"NodeFunctionLogGroup":   map[string]any{"Ref": "NodeProviderLogGroup"},
		"FailedEventQueueUrl":    map[string]any{"Ref": "FailedEventQueue"},
	} {
		o, ok := out[name].(map[string]any)
		if !ok {
			t.Errorf("no output %s", name)
			continue
		}
		if diff := cmp.Diff(want, o["Value"]); diff != "" {
			t.Errorf("output %s (-want +got):\n%s", name, diff)
		}
	}
}

func TestFunctionRoleIsLeastPrivilege(t *testing.T) {
	tpl := load(t)
	role := resource(t, tpl, "ProviderFunctionRole", "AWS::IAM::Role")
	for name, r := range tpl["Resources"].(map[string]any) {
		if r.(map[string]any)["Type"] != "AWS::Serverless::Function" {
			continue
		}
		want := map[string]any{"Fn::GetAtt": []any{"ProviderFunctionRole", "Arn"}}
		if diff := cmp.Diff(want, function(t, tpl, name)["Role"]); diff != "" {
			t.Errorf("%s: Role (-want +got):\n%s", name, diff)
		}
	}
	// Each action on exactly these resources: the log groups, the failure
	// queue, and "*" only for the X-Ray actions, which have no resource type.
	groups := []any{
		map[string]any{"Fn::GetAtt": []any{"QuickstartLogGroup", "Arn"}},
		map[string]any{"Fn::GetAtt": []any{"PythonProviderLogGroup", "Arn"}},
		map[string]any{"Fn::GetAtt": []any{"NodeProviderLogGroup", "Arn"}},
	}
	want := map[string][]any{
		"logs:CreateLogStream":     groups,
		"logs:PutLogEvents":        groups,
		"xray:PutTraceSegments":    {"*"},
		"xray:PutTelemetryRecords": {"*"},
		"sqs:SendMessage":          {map[string]any{"Fn::GetAtt": []any{"FailedEventQueue", "Arn"}}},
	}
	got := map[string][]any{}
	for _, p := range list(role["Policies"]) {
		for _, st := range list(p.(map[string]any)["PolicyDocument"].(map[string]any)["Statement"]) {
			st := st.(map[string]any)
			if st["Effect"] != "Allow" || st["NotAction"] != nil || st["NotResource"] != nil {
				t.Errorf("statement %v: only Allow with Action and Resource is expected", st)
			}
			for _, a := range list(st["Action"]) {
				got[a.(string)] = append(got[a.(string)], list(st["Resource"])...)
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("function role's actions and resources (-want +got):\n%s", diff)
	}
	for _, k := range []string{"ManagedPolicyArns", "PermissionsBoundary"} {
		if _, ok := role[k]; ok {
			t.Errorf("function role has %s: its permissions must all be in the inline policy checked here", k)
		}
	}
}
