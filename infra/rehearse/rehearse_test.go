package rehearse

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/acm"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/rds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	logs "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
)

// The repository root and the CDK app, from this package's folder.
const (
	repoRoot = "../.."
	cdkApp   = ".."
)

// The rehearsal's changes, one per stack: the CDK app's context providerZip
// (a new quickstart provider package: the function's code), and the SAM
// template's parameter FunctionTimeout (every function's timeout). moto's
// CloudFormation updates Lambda functions faithfully; its ECS task
// definition update registers CloudFormation's property names as the
// container's, so a changed container (cloudwatchAgentImage) cannot be read
// back.
const updatedTimeout = "61"

// TestRehearseAWS deploys the CDK stack and the translated SAM template into
// moto_server, checks what they created, updates each with one changed
// parameter, checks again and deletes both. REHEARSE_AWS=1 runs it;
// REHEARSE_CDK_CONTEXT is the CDK app's context as JSON (`make rehearse-aws`
// passes infra-synth's domain and placeholder choice); certificateArn is
// always the rehearsal's own, a certificate moto issued, since the load
// balancer's listener must find it in ACM.
func TestRehearseAWS(t *testing.T) {
	if os.Getenv("REHEARSE_AWS") != "1" {
		t.Skip("REHEARSE_AWS=1 runs the rehearsal (make rehearse-aws)")
	}
	started := time.Now()
	ctx := context.Background()
	cfg := startMoto(t)
	// No retries: a create moto answers with a 500 would otherwise come
	// back as "already exists" from the retry, hiding moto's error.
	cf := cloudformation.NewFromConfig(cfg, func(o *cloudformation.Options) { o.RetryMaxAttempts = 1 })
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	c := clients{
		iam: iam.NewFromConfig(cfg), lambda: lambda.NewFromConfig(cfg), logs: logs.NewFromConfig(cfg),
		sns: sns.NewFromConfig(cfg), sqs: sqs.NewFromConfig(cfg), ecs: ecs.NewFromConfig(cfg),
		elb: elbv2.NewFromConfig(cfg), ec2: ec2.NewFromConfig(cfg), rds: rds.NewFromConfig(cfg), s3: s3c,
	}

	// What `cdk bootstrap` and the operator provide before a deploy: the
	// assets bucket, the bootstrap version parameter the template checks,
	// and the HTTPS listener's certificate.
	assets := pseudo.Replace("cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}")
	codeBucket := "rehearsal-sam-code"
	for _, b := range []string{assets, codeBucket} {
		if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ssm.NewFromConfig(cfg).PutParameter(ctx, &ssm.PutParameterInput{
		Name: aws.String("/cdk-bootstrap/hnb659fds/version"), Value: aws.String("30"), Type: ssmtypes.ParameterTypeString,
	}); err != nil {
		t.Fatal(err)
	}
	cdkContext := map[string]any{}
	if s := os.Getenv("REHEARSE_CDK_CONTEXT"); s != "" {
		if err := json.Unmarshal([]byte(s), &cdkContext); err != nil {
			t.Fatalf("REHEARSE_CDK_CONTEXT: %v", err)
		}
	}
	domain, _ := cdkContext["domainName"].(string)
	if domain == "" {
		domain = "converge.example.com"
		cdkContext["domainName"] = domain
	}
	cert, err := acm.NewFromConfig(cfg).RequestCertificate(ctx, &acm.RequestCertificateInput{DomainName: aws.String(domain)})
	if err != nil {
		t.Fatal(err)
	}
	cdkContext["certificateArn"] = aws.ToString(cert.CertificateArn)

	// What each stack must hold: types moto creates, read back through
	// their APIs, and types it cannot, which must at least be declared.
	cdk := &stack{name: "Converge", bucket: assets,
		created: []string{
			"AWS::IAM::Role", "AWS::IAM::Policy", "AWS::Lambda::Function", "AWS::Logs::LogGroup", "AWS::SNS::Topic",
			"AWS::ECS::Cluster", "AWS::ECS::TaskDefinition", "AWS::ECS::Service",
			"AWS::ElasticLoadBalancingV2::LoadBalancer", "AWS::ElasticLoadBalancingV2::Listener", "AWS::ElasticLoadBalancingV2::TargetGroup",
			"AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::SecurityGroup", "AWS::RDS::DBSubnetGroup",
		},
		declared: []string{"AWS::SecretsManager::Secret", "AWS::CloudWatch::Alarm", "AWS::RDS::DBCluster", "AWS::Lambda::Url"},
	}
	cdk.template = publishAssets(t, s3c, synth(t, cdkContext), cdk.name)
	sam := &stack{name: "ConvergeProviders", bucket: codeBucket,
		params:   map[string]string{"DispatcherPrincipalArn": "arn:aws:iam::" + account + ":role/converge-dispatch"},
		created:  []string{"AWS::IAM::Role", "AWS::Lambda::Function", "AWS::Logs::LogGroup", "AWS::SQS::Queue"},
		declared: []string{"AWS::SecretsManager::Secret", "AWS::Lambda::Url", "AWS::CloudWatch::Alarm", "AWS::Lambda::EventInvokeConfig"},
	}
	sam.template = translateSAM(t, s3c, codeBucket)

	var types []string
	seen := map[string]bool{}
	for _, st := range []*stack{cdk, sam} {
		for _, r := range st.template.resources() {
			if typ := resType(r); !seen[typ] {
				seen[typ] = true
				types = append(types, typ)
			}
		}
	}
	sort.Strings(types)
	emulated := emulatedTypes(t, cf, types)

	for _, st := range []*stack{cdk, sam} {
		st.deploy(t, cf, s3c, emulated, false)
		check(t, c, st)
		st.expect(t)
	}
	report(t, types, cdk, sam)
	if t.Failed() {
		return
	}

	// The updates: a changed CDK context (synthesized again) and a changed
	// SAM parameter; check then compares every function and task definition
	// with the new template, and the two asserts below name the change.
	newCode := placeholderZip(t)
	zipPath := filepath.Join(t.TempDir(), "provider-update.zip")
	if err := os.WriteFile(zipPath, newCode, 0o644); err != nil {
		t.Fatal(err)
	}
	cdkContext["providerZip"] = zipPath
	cdk.template = publishAssets(t, s3c, synth(t, cdkContext), cdk.name)
	cdk.deploy(t, cf, s3c, emulated, true)
	check(t, c, cdk)
	assertCode(t, c, cdk, newCode)
	sam.params["FunctionTimeout"] = updatedTimeout
	sam.deploy(t, cf, s3c, emulated, true)
	check(t, c, sam)
	assertTimeouts(t, c, sam)

	// moto 5.2.1 cannot delete a VPC stack: its CloudFormation models of
	// route tables and gateway attachments have no delete, so the VPC keeps
	// "dependencies". That one refusal is logged; any other fails.
	for _, st := range []*stack{cdk, sam} {
		err := st.destroy(t, cf)
		switch {
		case err != nil && strings.Contains(err.Error(), "DependencyViolation") && strings.Contains(err.Error(), "vpc"):
			t.Logf("%v (moto leaves the VPC's route tables and gateway attachment)", err)
		case err != nil:
			t.Error(err)
		}
	}
	t.Logf("rehearsal took %s (moto_server start, two syntheses, a translation, two creates, two updates, two deletes)", time.Since(started).Round(time.Second))
}

// synth runs the CDK app with ctxValues into a fresh cloud assembly folder.
func synth(t *testing.T, ctxValues map[string]any) string {
	t.Helper()
	out := t.TempDir()
	j, _ := json.Marshal(ctxValues)
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = cdkApp
	cmd.Env = append(os.Environ(), "CDK_OUTDIR="+out, "CDK_CONTEXT_JSON="+string(j), "CDK_DEFAULT_REGION="+region,
		"JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("synthesize the CDK app with context %s: %v\n%s", j, err, b)
	}
	return out
}

// translateSAM translates template.yaml with scripts/sam-translate.py and
// uploads each function's package where the translation points its code:
// bin/functions/<folder>-<arch>.zip or <folder>.zip as `make functions`
// builds it, or a placeholder package when it was not built.
func translateSAM(t *testing.T, s3c *s3.Client, bucket string) template {
	t.Helper()
	cmd := exec.Command("python3", filepath.Join(repoRoot, "scripts/sam-translate.py"), "--code-bucket", bucket, "--region", region, filepath.Join(repoRoot, "template.yaml"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/sam-translate.py: %v\n%s", err, stderr.String())
	}
	var tm template
	if err := json.Unmarshal(b, &tm); err != nil {
		t.Fatal(err)
	}
	for id, r := range tm.resources() {
		code, _ := props(r)["Code"].(map[string]any)
		if resType(r) != "AWS::Lambda::Function" || code["S3Bucket"] != bucket {
			continue
		}
		key, _ := code["S3Key"].(string)
		arch := "x86_64"
		if a := list(props(r)["Architectures"]); len(a) > 0 {
			arch = fmt.Sprint(a[0])
		}
		goArch := map[string]string{"x86_64": "amd64", "arm64": "arm64"}[arch]
		base := filepath.Join(repoRoot, "bin/functions", filepath.Base(key))
		pkg := placeholderZip(t)
		found := false
		for _, p := range []string{base + "-" + goArch + ".zip", base + ".zip"} {
			if b, err := os.ReadFile(p); err == nil {
				pkg, found = b, true
				break
			}
		}
		if !found {
			t.Logf("%s: %s is not built (make functions): a placeholder package stands in", id, key)
		}
		upload(t, s3c, bucket, key, pkg)
	}
	return tm
}

// check reads every resource the stack created back through its service,
// comparing what the template states.
func check(t *testing.T, c clients, st *stack) {
	t.Helper()
	params := map[string]string{}
	for name, p := range st.template.section("Parameters") {
		if d, ok := p.(map[string]any)["Default"]; ok {
			params[name] = fmt.Sprint(d)
		}
	}
	for k, v := range st.params {
		params[k] = v
	}
	st.live = map[string]bool{}
	for id, r := range st.deployed.resources() {
		chk, ok := checkers[resType(r)]
		if !ok || !st.listed[id] {
			continue
		}
		res := resource{id: id, physical: st.physical[id], props: props(r), st: st, params: params}
		if err := chk(context.Background(), c, res); err != nil {
			t.Errorf("%s: %s (%s, %s): %v", st.name, id, resType(r), st.physical[id], err)
			continue
		}
		st.live[id] = true
	}
}

// expect fails t for each type of st.created that no resource of the stack
// has (created and read back), and each of st.declared its template lacks.
func (st *stack) expect(t *testing.T) {
	t.Helper()
	have, declared := map[string]bool{}, map[string]bool{}
	for id, r := range st.deployed.resources() {
		if st.live[id] {
			have[resType(r)] = true
		}
	}
	for _, r := range st.template.resources() {
		declared[resType(r)] = true
	}
	for _, typ := range st.created {
		if !have[typ] {
			t.Errorf("%s: no %s was created and read back", st.name, typ)
		}
	}
	for _, typ := range st.declared {
		if !declared[typ] {
			t.Errorf("%s: the template declares no %s", st.name, typ)
		}
	}
}

// assertCode: after the CDK update, a function runs the new package.
func assertCode(t *testing.T, c clients, st *stack, pkg []byte) {
	t.Helper()
	sum := sha256.Sum256(pkg)
	want := base64.StdEncoding.EncodeToString(sum[:])
	for id, r := range st.deployed.resources() {
		if resType(r) != "AWS::Lambda::Function" {
			continue
		}
		out, err := c.lambda.GetFunction(context.Background(), &lambda.GetFunctionInput{FunctionName: aws.String(st.physical[id])})
		if err != nil {
			t.Fatal(err)
		}
		if aws.ToString(out.Configuration.CodeSha256) == want {
			return
		}
	}
	t.Errorf("%s: after the update no function runs the new provider package (CodeSha256 %s)", st.name, want)
}

// assertTimeouts: after the SAM update, each function whose timeout is the
// FunctionTimeout parameter has the new value.
func assertTimeouts(t *testing.T, c clients, st *stack) {
	t.Helper()
	n := 0
	for id, r := range st.deployed.resources() {
		if ref, _ := props(r)["Timeout"].(map[string]any); resType(r) != "AWS::Lambda::Function" || ref["Ref"] != "FunctionTimeout" {
			continue
		}
		out, err := c.lambda.GetFunction(context.Background(), &lambda.GetFunctionInput{FunctionName: aws.String(st.physical[id])})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(aws.ToInt32(out.Configuration.Timeout)); got != updatedTimeout {
			t.Errorf("%s: %s's timeout is %s after the update, want %s", st.name, id, got, updatedTimeout)
		}
		n++
	}
	if n == 0 {
		t.Errorf("%s: no function's Timeout is the FunctionTimeout parameter", st.name)
	}
}

// report logs, and writes to REHEARSE_REPORT when set, each resource type
// of the two templates: read back through its API, created by moto's
// CloudFormation only, or left out (with the resources and why).
func report(t *testing.T, types []string, stacks ...*stack) {
	t.Helper()
	left := map[string][]string{}
	why := map[string]string{}
	for _, st := range stacks {
		for _, l := range st.leftOut {
			left[l.typ] = append(left[l.typ], st.name+"/"+l.id)
			why[l.typ] = l.why
		}
	}
	var b strings.Builder
	b.WriteString("| Resource type | In the moto rehearsal |\n|---|---|\n")
	for _, typ := range types {
		switch {
		case len(left[typ]) > 0:
			sort.Strings(left[typ])
			fmt.Fprintf(&b, "| %s | left out: %s (%s) |\n", typ, why[typ], strings.Join(left[typ], ", "))
		case checkers[typ] != nil:
			fmt.Fprintf(&b, "| %s | created, read back through its API |\n", typ)
		default:
			fmt.Fprintf(&b, "| %s | created (CloudFormation's listing only) |\n", typ)
		}
	}
	t.Logf("resource types:\n%s", b.String())
	if p := os.Getenv("REHEARSE_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
