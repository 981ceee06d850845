package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

const (
	testDomain = "converge.example.com"
	testImage  = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/converge:v1.2.3"
	testCert   = "arn:aws:acm:eu-west-1:123456789012:certificate/00000000-0000-0000-0000-000000000000"
)

// testConfig is the production configuration with a hosted zone (so the
// stack issues the certificate and writes the alias record): the one
// cdk-nag checks. Tests change a copy.
func testConfig() Config {
	return Config{
		ImageURI:                  testImage,
		DomainName:                testDomain,
		HostedZoneID:              "Z0123456789ABCDEFGHIJ",
		HostedZoneName:            "example.com",
		ProviderZip:               "testdata-absent.zip",
		PlaceholderProvider:       true,
		CloudWatchAgentImage:      defaultAgentImage,
		DeletionProtection:        true,
		VPCEndpoints:              true,
		ReaderCount:               1,
		BackupRetentionDays:       14,
		BackupWindow:              "03:00-04:00",
		AccessLogRetentionDays:    90,
		Control:                   TaskRange{Min: 2, Max: 6},
		Dispatch:                  TaskRange{Min: 2, Max: 8},
		QueueScaleOutDepth:        100,
		FailedDeliveriesThreshold: 25, QueueDepthThreshold: 1000,
	}
}

// synthesized is a stack, its template and, with cdk-nag applied, its
// annotations.
type synthesized struct {
	stack awscdk.Stack
	tpl   assertions.Template
}

// synthStack builds cfg's stack in a fresh app, in eu-west-1, with cdk-nag's
// AwsSolutions pack applied when nag is set.
func synthStack(cfg Config, nag bool) (synthesized, error) {
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(tempOutdir)})
	if nag {
		awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	}
	stack, err := NewConvergeStack(app, "Converge", cfg, &awscdk.StackProps{Env: &awscdk.Environment{Region: jsii.String("eu-west-1")}})
	if err != nil {
		return synthesized{}, err
	}
	return synthesized{stack: stack, tpl: assertions.Template_FromStack(stack, nil)}, nil
}

// One synthesis for most tests: each costs seconds of jsii round trips.
var synth = sync.OnceValues(func() (synthesized, error) { return synthStack(testConfig(), true) })

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
	s, err := synth()
	if err != nil {
		t.Fatal(err)
	}
	return s.tpl, resources(t, s.tpl)
}

// resources is the template's Resources section, by logical id.
func resources(t *testing.T, tpl assertions.Template) map[string]map[string]any {
	t.Helper()
	b, err := json.Marshal(tpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Resources map[string]map[string]any }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Resources
}

func TestResources(t *testing.T) {
	tpl, _ := template(t)
	for typ, n := range map[string]float64{
		"AWS::RDS::DBCluster": 1, "AWS::RDS::DBInstance": 2, "AWS::ECS::Service": 2,
		// Alarms: failed deliveries and queue depth to the topic, and the
		// queue-depth step scaling's out and in alarms.
		"AWS::Lambda::Url": 1, "AWS::CloudWatch::Alarm": 4, "AWS::KMS::Key": 1,
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

// convergeContainers are the converge containers' definitions by ROLE,
// each with its environment as a map under "env".
func convergeContainers(t *testing.T, res map[string]map[string]any) map[string]map[string]any {
	t.Helper()
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
			c["env"] = env
			roles[env["ROLE"].(string)] = c
		}
	}
	for _, role := range []string{"control", "dispatch"} {
		if _, ok := roles[role]; !ok {
			t.Fatalf("no %s task", role)
		}
	}
	return roles
}

func TestServicesConfiguration(t *testing.T) {
	_, res := template(t)
	containers := convergeContainers(t, res)
	roles := map[string]map[string]any{}
	for role, c := range containers {
		env := c["env"].(map[string]any)
		roles[role] = env
		if env["CALLBACK_BASE_URL"] != "https://"+testDomain || env["DB_IAM_AUTH"] != "true" || env["CONVERGE_SECRET_KEY_SECRET_ARN"] == nil {
			t.Errorf("%s environment: %v", role, env)
		}
		// ECS waits longer than the server's drain before SIGKILL.
		shutdown, err := time.ParseDuration(fmt.Sprint(env["SHUTDOWN_TIMEOUT"]))
		if stop, ok := c["StopTimeout"].(float64); err != nil || !ok || time.Duration(stop)*time.Second <= shutdown {
			t.Errorf("%s StopTimeout %v, SHUTDOWN_TIMEOUT %v: want a stop timeout beyond the drain", role, c["StopTimeout"], env["SHUTDOWN_TIMEOUT"])
		}
		// The image comes from context imageUri, not a Dockerfile asset.
		if c["Image"] != testImage {
			t.Errorf("%s image %v, want %s", role, c["Image"], testImage)
		}
	}
	// Control reads on the Aurora reader endpoint through the same URL as
	// DATABASE_URL's; dispatch has no read pool.
	write, _ := json.Marshal(roles["control"]["DATABASE_URL"])
	read, _ := json.Marshal(roles["control"]["DATABASE_READ_URL"])
	if !strings.Contains(string(read), `"ReadEndpoint.Address"`) || strings.ReplaceAll(string(read), "ReadEndpoint.Address", "Endpoint.Address") != string(write) {
		t.Errorf("control DATABASE_READ_URL %s, want DATABASE_URL %s on the reader endpoint", read, write)
	}
	if v, ok := roles["dispatch"]["DATABASE_READ_URL"]; ok {
		t.Errorf("dispatch DATABASE_READ_URL %v", v)
	}
	if roles["dispatch"]["CONVERGE_CALLBACK_KEY_SECRET_ARN"] == nil {
		t.Error("dispatch has no CONVERGE_CALLBACK_KEY_SECRET_ARN")
	}
}

// TestDeregistrationDelay: both target groups let a leaving task finish its
// requests for 30 s, not the default 300 s that slows every deploy.
func TestDeregistrationDelay(t *testing.T) {
	_, res := template(t)
	n := 0
	for id, r := range res {
		if r["Type"] != "AWS::ElasticLoadBalancingV2::TargetGroup" {
			continue
		}
		n++
		attrs, _ := json.Marshal(r["Properties"].(map[string]any)["TargetGroupAttributes"])
		if !strings.Contains(string(attrs), `{"Key":"deregistration_delay.timeout_seconds","Value":"30"}`) {
			t.Errorf("target group %s attributes %s, want deregistration_delay.timeout_seconds 30", id, attrs)
		}
	}
	if n != 2 {
		t.Errorf("%d target groups, want 2 (control, dispatch)", n)
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

// TestNag: cdk-nag's AwsSolutions pack finds no unsuppressed error in the
// production configuration; warnings and every suppression are listed (go
// test -v -run TestNag), each on a resource of its own, with its reason.
func TestNag(t *testing.T) {
	s, err := synth()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Metadata  map[string]any
		Resources map[string]struct {
			Metadata struct {
				CdkNag struct {
					RulesToSuppress []struct {
						ID, Reason string
						AppliesTo  []string `json:"applies_to"`
					} `json:"rules_to_suppress"`
				} `json:"cdk_nag"`
			}
		}
	}
	b, _ := json.Marshal(s.tpl.ToJSON())
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc.Metadata["cdk_nag"]; ok {
		t.Error("a stack-wide cdk-nag suppression")
	}
	n := 0
	for _, id := range slices.Sorted(maps.Keys(doc.Resources)) {
		for _, r := range doc.Resources[id].Metadata.CdkNag.RulesToSuppress {
			n++
			t.Logf("suppressed %s on %s %v: %s", r.ID, id, r.AppliesTo, r.Reason)
			if len(r.Reason) < 80 {
				t.Errorf("%s on %s: a reason a reviewer can check, please: %q", r.ID, id, r.Reason)
			}
		}
	}
	if n == 0 {
		t.Error("no suppression found: the metadata walk is broken")
	}
	ann := assertions.Annotations_FromStack(s.stack)
	pack := assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))
	errs, warns := *ann.FindError(jsii.String("*"), pack), *ann.FindWarning(jsii.String("*"), pack)
	for _, m := range errs {
		t.Errorf("cdk-nag error: %s: %v", *m.Id, m.Entry.Data)
	}
	for _, m := range warns {
		t.Logf("cdk-nag warning: %s: %v", *m.Id, m.Entry.Data)
	}
	t.Logf("cdk-nag AwsSolutions: %d unsuppressed errors, %d warnings, %d suppressions", len(errs), len(warns), n)
}

// variantConfig changes what testConfig fixes: an imported certificate and
// no hosted zone, two readers, no deletion protection, an image outside ECR,
// no VPC endpoints.
func variantConfig() Config {
	cfg := testConfig()
	cfg.CertificateArn, cfg.HostedZoneID, cfg.HostedZoneName = testCert, "", ""
	cfg.ReaderCount = 2
	cfg.DeletionProtection = false
	cfg.ImageURI = "ghcr.io/convergeplane/converge:v1.2.3"
	cfg.VPCEndpoints = false
	return cfg
}

var synthVariant = sync.OnceValues(func() (synthesized, error) { return synthStack(variantConfig(), false) })

func variant(t *testing.T) (assertions.Template, map[string]map[string]any) {
	t.Helper()
	s, err := synthVariant()
	if err != nil {
		t.Fatal(err)
	}
	return s.tpl, resources(t, s.tpl)
}

func TestDatabase(t *testing.T) {
	tpl, _ := template(t)
	tpl.HasResourceProperties(jsii.String("AWS::RDS::DBCluster"), &map[string]any{
		"BackupRetentionPeriod": 14, "PreferredBackupWindow": "03:00-04:00", "DeletionProtection": true,
		"EnableIAMDatabaseAuthentication": true,
	})
	// The writer (tier 0) and a reader sized with it (tier 1, the failover target).
	for _, tier := range []float64{0, 1} {
		tpl.HasResourceProperties(jsii.String("AWS::RDS::DBInstance"), &map[string]any{"DBInstanceClass": "db.serverless", "PromotionTier": tier})
	}
	v, _ := variant(t)
	v.ResourceCountIs(jsii.String("AWS::RDS::DBInstance"), jsii.Number(3))
	v.HasResourceProperties(jsii.String("AWS::RDS::DBCluster"), &map[string]any{"DeletionProtection": false})
}

func TestAutoscaling(t *testing.T) {
	tpl, res := template(t)
	for _, svc := range []struct {
		prefix   string
		min, max float64
	}{{"ControlTaskCountTarget", 2, 6}, {"DispatchTaskCountTarget", 2, 8}} {
		tpl.HasResource(jsii.String("AWS::ApplicationAutoScaling::ScalableTarget"), &map[string]any{
			"Properties": map[string]any{"MinCapacity": svc.min, "MaxCapacity": svc.max, "ScalableDimension": "ecs:service:DesiredCount"},
		})
		n := 0
		for id, r := range res {
			if r["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy" && strings.HasPrefix(id, svc.prefix+"Cpu") {
				b, _ := json.Marshal(r["Properties"])
				if !strings.Contains(string(b), `"PredefinedMetricType":"ECSServiceAverageCPUUtilization"`) || !strings.Contains(string(b), `"TargetValue":60`) {
					t.Errorf("%s: %s", id, b)
				}
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d CPU policies, want 1", svc.prefix, n)
		}
	}
	// Control: requests per task, on its target group.
	tpl.HasResourceProperties(jsii.String("AWS::ApplicationAutoScaling::ScalingPolicy"), &map[string]any{
		"ScalingTargetId": map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^ControlTaskCountTarget"))},
		"TargetTrackingScalingPolicyConfiguration": map[string]any{
			"PredefinedMetricSpecification": map[string]any{"PredefinedMetricType": "ALBRequestCountPerTarget", "ResourceLabel": assertions.Match_AnyValue()},
			"TargetValue":                   1000,
		},
	})
	// Dispatch: the queue depth the metrics agent publishes, out from 100
	// queued tasks, in when the queue is empty.
	for _, a := range []map[string]any{
		{"ComparisonOperator": "GreaterThanOrEqualToThreshold", "Threshold": 100},
		{"ComparisonOperator": "LessThanOrEqualToThreshold", "Threshold": 0},
	} {
		a["Namespace"], a["MetricName"], a["Statistic"] = "Converge", "converge_dispatch_pending_tasks", "Sum"
		a["Dimensions"] = []any{map[string]any{"Name": "job", "Value": "converge-dispatch"}}
		a["AlarmActions"] = []any{map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^DispatchTaskCountTargetQueueDepth"))}}
		tpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), &a)
	}
	tpl.HasResourceProperties(jsii.String("AWS::ApplicationAutoScaling::ScalingPolicy"), &map[string]any{
		"ScalingTargetId": map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^DispatchTaskCountTarget"))},
		"StepScalingPolicyConfiguration": map[string]any{"StepAdjustments": []any{
			map[string]any{"MetricIntervalLowerBound": 0, "MetricIntervalUpperBound": 100, "ScalingAdjustment": 1},
			map[string]any{"MetricIntervalLowerBound": 100, "MetricIntervalUpperBound": 300, "ScalingAdjustment": 2},
			map[string]any{"MetricIntervalLowerBound": 300, "ScalingAdjustment": 4},
		}},
	})
	// Both services roll back a failed deployment, and leave their task
	// count to autoscaling.
	n := 0
	for id, r := range res {
		if r["Type"] != "AWS::ECS::Service" {
			continue
		}
		n++
		p := r["Properties"].(map[string]any)
		b, _ := json.Marshal(p["DeploymentConfiguration"])
		if !strings.Contains(string(b), `"DeploymentCircuitBreaker":{"Enable":true,"Rollback":true}`) {
			t.Errorf("%s deployment configuration %s", id, b)
		}
		if d, ok := p["DesiredCount"]; ok {
			t.Errorf("%s has DesiredCount %v: a deploy would reset the scaled count", id, d)
		}
	}
	if n != 2 {
		t.Errorf("%d services, want 2", n)
	}
}

func TestHTTPS(t *testing.T) {
	// With a hosted zone: a certificate validated by DNS there, the listener
	// on it, and an alias record to the load balancer.
	tpl, _ := template(t)
	tpl.HasResourceProperties(jsii.String("AWS::CertificateManager::Certificate"), &map[string]any{
		"DomainName": testDomain, "ValidationMethod": "DNS",
		"DomainValidationOptions": []any{map[string]any{"DomainName": testDomain, "HostedZoneId": "Z0123456789ABCDEFGHIJ"}},
	})
	tpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), &map[string]any{
		"Certificates": []any{map[string]any{"CertificateArn": map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^Certificate"))}}},
		"SslPolicy":    assertions.Match_StringLikeRegexp(jsii.String("^ELBSecurityPolicy-TLS13")),
	})
	tpl.ResourceCountIs(jsii.String("AWS::Route53::RecordSet"), jsii.Number(1))
	tpl.HasResourceProperties(jsii.String("AWS::Route53::RecordSet"), &map[string]any{
		"Name": testDomain + ".", "Type": "A", "HostedZoneId": "Z0123456789ABCDEFGHIJ",
		"AliasTarget": map[string]any{"HostedZoneId": map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^Alb")), "CanonicalHostedZoneID"}}, "DNSName": assertions.Match_AnyValue()},
	})
	tpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::LoadBalancer"), &map[string]any{
		"LoadBalancerAttributes": assertions.Match_ArrayWith(&[]any{map[string]any{"Key": "routing.http.drop_invalid_header_fields.enabled", "Value": "true"}}),
	})
	// Without one: the imported certificate, and no record.
	v, _ := variant(t)
	v.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), &map[string]any{
		"Certificates": []any{map[string]any{"CertificateArn": testCert}},
	})
	v.ResourceCountIs(jsii.String("AWS::CertificateManager::Certificate"), jsii.Number(0))
	v.ResourceCountIs(jsii.String("AWS::Route53::RecordSet"), jsii.Number(0))
}

func TestAccessLogsAndWAF(t *testing.T) {
	tpl, res := template(t)
	tpl.HasResourceProperties(jsii.String("AWS::S3::Bucket"), &map[string]any{
		"BucketEncryption": map[string]any{"ServerSideEncryptionConfiguration": []any{
			map[string]any{"ServerSideEncryptionByDefault": map[string]any{"SSEAlgorithm": "AES256"}},
		}},
		"VersioningConfiguration": map[string]any{"Status": "Enabled"},
		"PublicAccessBlockConfiguration": map[string]any{
			"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true,
		},
		"LifecycleConfiguration": map[string]any{"Rules": assertions.Match_ArrayWith(&[]any{
			assertions.Match_ObjectLike(&map[string]any{"ExpirationInDays": 90, "Status": "Enabled"}),
		})},
	})
	// TLS only.
	tpl.HasResourceProperties(jsii.String("AWS::S3::BucketPolicy"), &map[string]any{
		"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{
			"Effect": "Deny", "Action": "s3:*", "Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
		})})},
	})
	var attrs []any
	for _, r := range res {
		if r["Type"] == "AWS::ElasticLoadBalancingV2::LoadBalancer" {
			attrs = r["Properties"].(map[string]any)["LoadBalancerAttributes"].([]any)
		}
	}
	got := map[string]string{}
	for _, a := range attrs {
		a := a.(map[string]any)
		b, _ := json.Marshal(a["Value"])
		got[a["Key"].(string)] = string(b)
	}
	if got["access_logs.s3.enabled"] != `"true"` || !strings.Contains(got["access_logs.s3.bucket"], `"Ref":"AccessLogs`) {
		t.Errorf("load balancer attributes %v: no access logs to the AccessLogs bucket", got)
	}
	// The web ACL with the managed rule groups, on the load balancer.
	rules := []any{}
	for i, name := range []string{"AWSManagedRulesCommonRuleSet", "AWSManagedRulesKnownBadInputsRuleSet"} {
		rules = append(rules, assertions.Match_ObjectLike(&map[string]any{
			"Name": name, "Priority": i, "OverrideAction": map[string]any{"None": map[string]any{}},
			"Statement": map[string]any{"ManagedRuleGroupStatement": assertions.Match_ObjectLike(&map[string]any{"VendorName": "AWS", "Name": name})},
		}))
	}
	tpl.HasResourceProperties(jsii.String("AWS::WAFv2::WebACL"), &map[string]any{
		"Scope": "REGIONAL", "DefaultAction": map[string]any{"Allow": map[string]any{}}, "Rules": rules,
	})
	tpl.HasResourceProperties(jsii.String("AWS::WAFv2::WebACLAssociation"), &map[string]any{
		"ResourceArn": map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^Alb"))},
		"WebACLArn":   map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^WebAcl")), "Arn"}},
	})
}

func TestVPCEndpoints(t *testing.T) {
	tpl, res := template(t)
	var services []string
	for _, r := range res {
		if r["Type"] != "AWS::EC2::VPCEndpoint" {
			continue
		}
		p := r["Properties"].(map[string]any)
		name, _ := p["ServiceName"].(string)
		if p["VpcEndpointType"] == "Interface" {
			services = append(services, strings.TrimPrefix(name, "com.amazonaws.eu-west-1."))
			b, _ := json.Marshal(p["SecurityGroupIds"])
			if p["PrivateDnsEnabled"] != true || !strings.Contains(string(b), `"EndpointsSg`) {
				t.Errorf("endpoint %s: private DNS %v, security groups %s", name, p["PrivateDnsEnabled"], b)
			}
		}
	}
	slices.Sort(services)
	if want := []string{"ecr.api", "ecr.dkr", "kms", "lambda", "logs", "secretsmanager", "sts"}; !slices.Equal(services, want) {
		t.Errorf("interface endpoints %v, want %v", services, want)
	}
	tpl.HasResourceProperties(jsii.String("AWS::EC2::VPCEndpoint"), &map[string]any{
		"VpcEndpointType": "Gateway", "ServiceName": map[string]any{"Fn::Join": []any{"", []any{"com.amazonaws.", map[string]any{"Ref": "AWS::Region"}, ".s3"}}},
	})
	// The endpoints admit HTTPS from the two task groups, nothing else.
	var sources []string
	for id, r := range res {
		p, _ := r["Properties"].(map[string]any)
		switch {
		case r["Type"] == "AWS::EC2::SecurityGroup" && strings.HasPrefix(id, "EndpointsSg"):
			if in, ok := p["SecurityGroupIngress"]; ok {
				t.Errorf("endpoints security group has inline ingress %v", in)
			}
		case r["Type"] == "AWS::EC2::SecurityGroupIngress":
			b, _ := json.Marshal(p["GroupId"])
			if !strings.Contains(string(b), `"EndpointsSg`) {
				continue
			}
			src, _ := json.Marshal(p["SourceSecurityGroupId"])
			if p["FromPort"] != 443.0 || p["ToPort"] != 443.0 {
				t.Errorf("%s: ports %v-%v", id, p["FromPort"], p["ToPort"])
			}
			sources = append(sources, string(src))
		}
	}
	slices.Sort(sources)
	if want := []string{`{"Fn::GetAtt":["ControlSgBD859011","GroupId"]}`, `{"Fn::GetAtt":["DispatchSg4F36FF75","GroupId"]}`}; !slices.Equal(sources, want) {
		t.Errorf("endpoint ingress from %v, want the task groups %v", sources, want)
	}
	v, vres := variant(t)
	v.ResourceCountIs(jsii.String("AWS::EC2::VPCEndpoint"), jsii.Number(0))

	// With private DNS, Lambda's and STS's names resolve to the endpoints'
	// addresses in the public subnets: the dispatcher's egress guard must
	// allow those subnets (DISPATCH_ALLOW_CIDRS), or it refuses every Invoke.
	var public []string
	for id, r := range res {
		if r["Type"] == "AWS::EC2::Subnet" && strings.HasPrefix(id, "VpcpublicSubnet") {
			public = append(public, r["Properties"].(map[string]any)["CidrBlock"].(string))
		}
	}
	slices.Sort(public)
	env := func(res map[string]map[string]any, role string) map[string]any {
		return convergeContainers(t, res)[role]["env"].(map[string]any)
	}
	allowed, _ := env(res, "dispatch")["DISPATCH_ALLOW_CIDRS"].(string)
	got := strings.Split(allowed, ",")
	slices.Sort(got)
	if len(public) != 2 || !slices.Equal(got, public) {
		t.Errorf("dispatch DISPATCH_ALLOW_CIDRS %q, want the endpoints' subnets %v", allowed, public)
	}
	if v, ok := env(res, "control")["DISPATCH_ALLOW_CIDRS"]; ok {
		t.Errorf("control DISPATCH_ALLOW_CIDRS %v: it dispatches nothing", v)
	}
	if v, ok := env(vres, "dispatch")["DISPATCH_ALLOW_CIDRS"]; ok {
		t.Errorf("DISPATCH_ALLOW_CIDRS %v without VPC endpoints: nothing private to reach", v)
	}
}

// TestImage: an ECR image is pulled with the execution roles, allowed on
// that repository only; another registry's gets no ECR grant.
func TestImage(t *testing.T) {
	ecrPull := func(res map[string]map[string]any) []string {
		var found []string
		for id, r := range res {
			if r["Type"] != "AWS::IAM::Policy" {
				continue
			}
			for _, st := range asList(r["Properties"].(map[string]any)["PolicyDocument"].(map[string]any)["Statement"]) {
				st := st.(map[string]any)
				if slices.Contains(asList(st["Action"]), any("ecr:BatchGetImage")) {
					b, _ := json.Marshal(st["Resource"])
					found = append(found, id+" "+string(b))
				}
			}
		}
		slices.Sort(found)
		return found
	}
	_, res := template(t)
	got := ecrPull(res)
	if len(got) != 2 {
		t.Fatalf("ECR pull statements %v, want one per execution role", got)
	}
	for i, role := range []string{"ControlTaskExecutionRole", "DispatchTaskExecutionRole"} {
		if !strings.HasPrefix(got[i], role) || !strings.HasSuffix(got[i], ` "arn:aws:ecr:eu-west-1:123456789012:repository/converge"`) {
			t.Errorf("ECR pull %s, want %s on the converge repository", got[i], role)
		}
	}
	_, vres := variant(t)
	if got := ecrPull(vres); len(got) != 0 {
		t.Errorf("ghcr.io image: ECR pull statements %v", got)
	}
	for role, c := range convergeContainers(t, vres) {
		if c["Image"] != variantConfig().ImageURI {
			t.Errorf("%s image %v", role, c["Image"])
		}
	}
}

// TestConfigErrors: the stack refuses what it cannot be deployed from,
// before building anything.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.ImageURI = "" }, "context imageUri is required"},
		{func(c *Config) { c.ImageURI = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/converge" }, "want ACCOUNT.dkr.ecr"},
		{func(c *Config) { c.HostedZoneID, c.HostedZoneName = "", "" }, "certificateArn, or hostedZoneId"},
		{func(c *Config) { c.HostedZoneName = "" }, "go together"},
		{func(c *Config) { c.DomainName = "converge.example.org" }, "not in hosted zone"},
		{func(c *Config) { c.BackupRetentionDays = 0 }, "backupRetentionDays"},
		{func(c *Config) { c.Dispatch = TaskRange{Min: 3, Max: 2} }, "dispatchMinTasks"},
		{func(c *Config) { c.Control.Min = 0 }, "controlMinTasks"},
	} {
		cfg := testConfig()
		c.change(&cfg)
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("validate() = %v, want %q", err, c.want)
		}
	}
	if err := testConfig().validate(); err != nil {
		t.Errorf("testConfig: %v", err)
	}
}

// TestContextDefaults: configFromContext's defaults, and cdk.json's numbers
// read like -c strings.
func TestContextDefaults(t *testing.T) {
	app := awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{"imageUri": testImage, "readerCount": 3, "dispatchMaxTasks": "9"}})
	cfg, err := configFromContext(app)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ImageURI != testImage || cfg.ReaderCount != 3 || !cfg.DeletionProtection || !cfg.VPCEndpoints || cfg.BackupRetentionDays != 14 || cfg.BackupWindow != "03:00-04:00" ||
		cfg.Control != (TaskRange{2, 6}) || cfg.Dispatch != (TaskRange{2, 9}) || cfg.AccessLogRetentionDays != 90 || cfg.QueueScaleOutDepth != 100 {
		t.Errorf("config %+v", cfg)
	}
	bad := awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{"readerCount": "1.5"}})
	if _, err := configFromContext(bad); err == nil || !strings.Contains(err.Error(), "readerCount") {
		t.Errorf("readerCount 1.5: %v", err)
	}
}
