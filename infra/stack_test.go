package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

const testDomain = "converge.example.com"

// One synthesis for every test: each costs seconds of jsii round trips.
var synth = sync.OnceValues(func() (assertions.Template, error) {
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(tempOutdir)})
	stack, err := NewConvergeStack(app, "Converge", Config{
		CertificateArn:            "arn:aws:acm:eu-west-1:123456789012:certificate/00000000-0000-0000-0000-000000000000",
		DomainName:                testDomain,
		RepoRoot:                  "..",
		ProviderZip:               "testdata-absent.zip",
		PlaceholderProvider:       true,
		CloudWatchAgentImage:      defaultAgentImage,
		DeletionProtection:        true,
		FailedDeliveriesThreshold: 25, QueueDepthThreshold: 1000,
	}, nil)
	if err != nil {
		return nil, err
	}
	return assertions.Template_FromStack(stack, nil), nil
})

var tempOutdir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "converge-cdk-")
	if err != nil {
		panic(err)
	}
	tempOutdir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func template(t *testing.T) (assertions.Template, map[string]map[string]any) {
	t.Helper()
	tpl, err := synth()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(tpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Resources map[string]map[string]any }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return tpl, doc.Resources
}

func TestResources(t *testing.T) {
	tpl, _ := template(t)
	for typ, n := range map[string]float64{
		"AWS::RDS::DBCluster": 1, "AWS::RDS::DBInstance": 1, "AWS::ECS::Service": 2,
		"AWS::Lambda::Url": 1, "AWS::CloudWatch::Alarm": 2, "AWS::KMS::Key": 1,
		// No NAT gateway: tasks use public IPs (see docs/aws.md for why).
		"AWS::EC2::NatGateway": 0,
	} {
		tpl.ResourceCountIs(jsii.String(typ), jsii.Number(n))
	}
	tpl.HasResourceProperties(jsii.String("AWS::RDS::DBCluster"), &map[string]any{
		"Engine": "aurora-postgresql", "EnableIAMDatabaseAuthentication": true, "StorageEncrypted": true,
		"ServerlessV2ScalingConfiguration": map[string]any{"MinCapacity": 0.5, "MaxCapacity": 4},
		"EnableHttpEndpoint":               true, "DeletionProtection": true,
	})
	tpl.HasResourceProperties(jsii.String("AWS::RDS::DBInstance"), &map[string]any{"DBInstanceClass": "db.serverless"})
	tpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), &map[string]any{
		"Runtime": "provided.al2023", "Architectures": []any{"arm64"}, "Handler": "bootstrap",
	})
	tpl.HasResourceProperties(jsii.String("AWS::Lambda::Url"), &map[string]any{"AuthType": "AWS_IAM"})
	tpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), &map[string]any{
		"Port": 443, "Protocol": "HTTPS",
		"Certificates": []any{map[string]any{"CertificateArn": "arn:aws:acm:eu-west-1:123456789012:certificate/00000000-0000-0000-0000-000000000000"}},
	})
	tpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::ListenerRule"), &map[string]any{
		"Conditions": []any{map[string]any{"Field": "path-pattern", "PathPatternConfig": map[string]any{"Values": []any{"/v1/tasks/*"}}}},
	})
	for _, m := range []string{"converge_dispatch_deliveries_total", "converge_dispatch_pending_tasks"} {
		tpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), &map[string]any{
			"Namespace": "Converge", "MetricName": m, "Dimensions": []any{map[string]any{"Name": "job", "Value": "converge-dispatch"}},
		})
	}
	// The database lives in the isolated subnets only.
	tpl.HasResourceProperties(jsii.String("AWS::RDS::DBSubnetGroup"), &map[string]any{
		"SubnetIds": assertions.Match_ArrayWith(&[]any{map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^VpcdbSubnet"))}}),
	})
}

func TestServicesConfiguration(t *testing.T) {
	_, res := template(t)
	roles := map[string]map[string]any{}
	for _, r := range res {
		if r["Type"] != "AWS::ECS::TaskDefinition" {
			continue
		}
		for _, c := range r["Properties"].(map[string]any)["ContainerDefinitions"].([]any) {
			c := c.(map[string]any)
			if c["Name"] != "converge" {
				continue
			}
			env := map[string]any{}
			for _, e := range c["Environment"].([]any) {
				env[e.(map[string]any)["Name"].(string)] = e.(map[string]any)["Value"]
			}
			roles[env["ROLE"].(string)] = env
		}
	}
	for _, role := range []string{"control", "dispatch"} {
		env, ok := roles[role]
		if !ok {
			t.Fatalf("no %s task", role)
		}
		if env["CALLBACK_BASE_URL"] != "https://"+testDomain || env["DB_IAM_AUTH"] != "true" || env["CONVERGE_SECRET_KEY_SECRET_ARN"] == nil {
			t.Errorf("%s environment: %v", role, env)
		}
	}
	if roles["dispatch"]["CONVERGE_CALLBACK_KEY_SECRET_ARN"] == nil {
		t.Error("dispatch has no CONVERGE_CALLBACK_KEY_SECRET_ARN")
	}
}

// scopeExceptions are the actions AWS only authorizes on "*".
var scopeExceptions = map[string]string{
	"ecr:GetAuthorizationToken": "ECR issues registry-wide tokens; the action has no resource type (the ECS execution role pulls the image with it)",
}

// TestEveryIAMStatementIsScoped: every Allow names its resources, and no role
// carries a managed policy (whose statements this test could not see).
func TestEveryIAMStatementIsScoped(t *testing.T) {
	_, res := template(t)
	check := func(where string, doc any) {
		for _, st := range asList(doc.(map[string]any)["Statement"]) {
			st := st.(map[string]any)
			if _, ok := st["NotResource"]; ok {
				t.Errorf("%s: NotResource in %v", where, st)
			}
			if _, ok := st["NotAction"]; ok {
				t.Errorf("%s: NotAction in %v", where, st)
			}
			if !slices.Contains(asList(st["Resource"]), any("*")) {
				continue
			}
			for _, a := range asList(st["Action"]) {
				if _, ok := scopeExceptions[a.(string)]; !ok {
					t.Errorf(`%s: %v on "*"`, where, a)
				}
			}
		}
	}
	n := 0
	for name, r := range res {
		p, _ := r["Properties"].(map[string]any)
		switch r["Type"] {
		case "AWS::IAM::Policy":
			check(name, p["PolicyDocument"])
			n++
		case "AWS::IAM::Role":
			if _, ok := p["ManagedPolicyArns"]; ok {
				t.Errorf("%s has managed policies", name)
			}
			for _, pol := range asList(p["Policies"]) {
				check(name, pol.(map[string]any)["PolicyDocument"])
			}
		case "AWS::KMS::Key":
			// In a key policy "*" is the key itself; what matters is who: the
			// account (so IAM policies decide) or a named principal.
			for _, st := range asList(p["KeyPolicy"].(map[string]any)["Statement"]) {
				if pr := st.(map[string]any)["Principal"]; pr == "*" || pr == nil {
					t.Errorf("%s: key policy statement for anyone: %v", name, st)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no IAM policy found: the walk is broken")
	}
}

func TestDispatcherInvokesOnlyTheProvider(t *testing.T) {
	_, res := template(t)
	var found int
	for name, r := range res {
		if r["Type"] != "AWS::IAM::Policy" {
			continue
		}
		doc := r["Properties"].(map[string]any)["PolicyDocument"]
		for _, st := range asList(doc.(map[string]any)["Statement"]) {
			st := st.(map[string]any)
			acts := asList(st["Action"])
			if !slices.ContainsFunc(acts, func(a any) bool { return strings.HasPrefix(a.(string), "lambda:") }) {
				continue
			}
			found++
			if !strings.HasPrefix(name, "DispatchTaskTaskRole") {
				t.Errorf("%s may invoke Lambda", name)
			}
			b, _ := json.Marshal(st)
			want := `{"Action":["lambda:InvokeFunction","lambda:InvokeFunctionUrl"],"Effect":"Allow","Resource":{"Fn::GetAtt":["QuickstartProvider`
			if !strings.HasPrefix(string(b), want) || !strings.HasSuffix(string(b), `","Arn"]}}`) {
				t.Errorf("lambda statement %s", b)
			}
		}
	}
	if found != 1 {
		t.Errorf("%d lambda statements, want 1", found)
	}
}

func asList(v any) []any {
	if s, ok := v.([]any); ok {
		return s
	}
	if v == nil {
		return nil
	}
	return []any{v}
}
