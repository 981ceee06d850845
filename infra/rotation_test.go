package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/jsii-runtime-go"
)

// TestKeyRotation: both keys rotate every 30 days with the rotation
// function, not on deploy and only once the bootstrap wrote them and the
// function may be invoked; the
// function is arm64 with a log group kept a month and the two secrets'
// ARNs in its environment; Secrets Manager may invoke it for those two
// secrets only.
func TestKeyRotation(t *testing.T) {
	tpl, res := template(t)
	fn := logicalID(t, res, "AWS::Lambda::Function", func(p map[string]any) bool {
		return strings.Contains(fmt.Sprint(p["Description"]), "CONVERGE_SECRET_KEY and CONVERGE_CALLBACK_KEY")
	})
	secretKey, callbackKey := secretID(t, res, "CONVERGE_SECRET_KEY:"), secretID(t, res, "CONVERGE_CALLBACK_KEY:")
	tpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), &map[string]any{
		"Runtime": "provided.al2023", "Architectures": []any{"arm64"}, "Handler": "bootstrap", "Timeout": 300,
		"Environment": map[string]any{"Variables": map[string]any{
			"SECRET_KEY_ARN": map[string]any{"Ref": secretKey}, "CALLBACK_KEY_ARN": map[string]any{"Ref": callbackKey},
		}},
	})
	props := res[fn]["Properties"].(map[string]any)
	logs := props["LoggingConfig"].(map[string]any)["LogGroup"].(map[string]any)["Ref"].(string)
	if r := res[logs]["Properties"].(map[string]any)["RetentionInDays"]; r != float64(30) {
		t.Errorf("the rotation function's log group keeps %v days, want 30", r)
	}

	var perms []string
	for name, r := range res {
		if p, _ := r["Properties"].(map[string]any); r["Type"] == "AWS::Lambda::Permission" && p["Principal"] == "secretsmanager.amazonaws.com" {
			perms = append(perms, name)
		}
	}
	if len(perms) != 2 {
		t.Fatalf("%d invoke permissions for secretsmanager, want 2", len(perms))
	}
	bootstrap := logicalID(t, res, "AWS::CloudFormation::CustomResource", func(p map[string]any) bool { return p["SecretKeyArn"] != nil })
	var rotated []string
	for name, r := range res {
		if r["Type"] != "AWS::SecretsManager::RotationSchedule" {
			continue
		}
		p := r["Properties"].(map[string]any)
		want := map[string]any{"RotationRules": map[string]any{"ScheduleExpression": "rate(30 days)"}, "RotateImmediatelyOnUpdate": false,
			"RotationLambdaARN": map[string]any{"Fn::GetAtt": []any{fn, "Arn"}}}
		for k, v := range want {
			if got, _ := json.Marshal(p[k]); string(got) != mustJSON(t, v) {
				t.Errorf("%s: %s = %s, want %s", name, k, got, mustJSON(t, v))
			}
		}
		for _, dep := range []string{bootstrap, perms[0], perms[1]} {
			if !slices.Contains(asList(r["DependsOn"]), any(dep)) {
				t.Errorf("%s does not wait for %s: DependsOn %v", name, dep, r["DependsOn"])
			}
		}
		rotated = append(rotated, mustJSON(t, p["SecretId"]))
	}
	slices.Sort(rotated)
	if want := []string{mustJSON(t, map[string]any{"Ref": callbackKey}), mustJSON(t, map[string]any{"Ref": secretKey})}; !slices.Equal(rotated, sortStrings(want)) {
		t.Errorf("rotated secrets %v, want %v", rotated, want)
	}

	var invokers []string
	for _, r := range res {
		p, _ := r["Properties"].(map[string]any)
		if r["Type"] != "AWS::Lambda::Permission" || p["Principal"] != "secretsmanager.amazonaws.com" {
			continue
		}
		if got := mustJSON(t, p["FunctionName"]); got != mustJSON(t, map[string]any{"Fn::GetAtt": []any{fn, "Arn"}}) {
			t.Errorf("secretsmanager may invoke %s", got)
		}
		if p["SourceAccount"] == nil {
			t.Errorf("a permission without SourceAccount: %v", p)
		}
		invokers = append(invokers, mustJSON(t, p["SourceArn"]))
	}
	slices.Sort(invokers)
	if !slices.Equal(invokers, rotated) {
		t.Errorf("secretsmanager may invoke the function for %v, want exactly %v", invokers, rotated)
	}
}

// TestKeyRotationRoleIsLeastPrivilege: the function's role reads and
// writes the two key secrets, uses the KMS key only through Secrets
// Manager, writes its own log group, and nothing else (no
// GetRandomPassword on "*", no ECS).
func TestKeyRotationRoleIsLeastPrivilege(t *testing.T) {
	_, res := template(t)
	fn := logicalID(t, res, "AWS::Lambda::Function", func(p map[string]any) bool {
		return strings.Contains(fmt.Sprint(p["Description"]), "CONVERGE_SECRET_KEY and CONVERGE_CALLBACK_KEY")
	})
	role := res[fn]["Properties"].(map[string]any)["Role"].(map[string]any)["Fn::GetAtt"].([]any)[0].(string)
	secretKey, callbackKey := secretID(t, res, "CONVERGE_SECRET_KEY:"), secretID(t, res, "CONVERGE_CALLBACK_KEY:")
	kmsKey := logicalID(t, res, "AWS::KMS::Key", func(map[string]any) bool { return true })
	var got []string
	for _, r := range res {
		p, _ := r["Properties"].(map[string]any)
		if r["Type"] != "AWS::IAM::Policy" || !slices.ContainsFunc(asList(p["Roles"]), func(v any) bool { return mustJSON(t, v) == mustJSON(t, map[string]any{"Ref": role}) }) {
			continue
		}
		for _, st := range asList(p["PolicyDocument"].(map[string]any)["Statement"]) {
			st := st.(map[string]any)
			for _, a := range asList(st["Action"]) {
				got = append(got, a.(string)+" on "+mustJSON(t, st["Resource"])+condition(t, st))
			}
		}
	}
	secrets := mustJSON(t, []any{map[string]any{"Ref": secretKey}, map[string]any{"Ref": callbackKey}})
	kms := mustJSON(t, map[string]any{"Fn::GetAtt": []any{kmsKey, "Arn"}}) +
		` if {"StringEquals":{"kms:ViaService":{"Fn::Join":["",["secretsmanager.",{"Ref":"AWS::Region"},".amazonaws.com"]]}}}`
	want := []string{
		"kms:Decrypt on " + kms, "kms:GenerateDataKey on " + kms,
		"secretsmanager:DescribeSecret on " + secrets, "secretsmanager:GetSecretValue on " + secrets,
		"secretsmanager:PutSecretValue on " + secrets, "secretsmanager:UpdateSecretVersionStage on " + secrets,
	}
	var logs []string
	for _, g := range got {
		if strings.HasPrefix(g, "logs:") {
			logs = append(logs, g)
		}
	}
	if len(logs) != 2 {
		t.Errorf("log statements %v, want CreateLogStream and PutLogEvents on its log group", logs)
	}
	got = slices.DeleteFunc(got, func(g string) bool { return strings.HasPrefix(g, "logs:") })
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the rotation role may\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestKeyRotationContext: keyRotationDays sets the schedule; a value the
// rotation function would refuse (under 3 days), or not whole days, is
// refused at synthesis; without the package and without
// placeholderProvider synthesis fails naming make functions.
func TestKeyRotationContext(t *testing.T) {
	build := func(ctx map[string]any, cfg Config) (awscdk.Stack, error) {
		app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(tempOutdir), Context: &ctx})
		stack := awscdk.NewStack(app, jsii.String("Rotation"), nil)
		key := awskms.NewKey(stack, jsii.String("Key"), nil)
		sk := awssecretsmanager.NewSecret(stack, jsii.String("SecretKey"), &awssecretsmanager.SecretProps{EncryptionKey: key})
		ck := awssecretsmanager.NewSecret(stack, jsii.String("CallbackKey"), &awssecretsmanager.SecretProps{EncryptionKey: key})
		return stack, addKeyRotation(stack, cfg, key, sk, ck, sk)
	}
	placeholder := Config{PlaceholderProvider: true}
	stack, err := build(map[string]any{"keyRotationDays": "7", "keyRotationZip": "absent.zip"}, placeholder)
	if err != nil {
		t.Fatal(err)
	}
	tpl := assertions.Template_FromStack(stack, nil)
	tpl.ResourceCountIs(jsii.String("AWS::SecretsManager::RotationSchedule"), jsii.Number(2))
	tpl.AllResourcesProperties(jsii.String("AWS::SecretsManager::RotationSchedule"), &map[string]any{
		"RotationRules": map[string]any{"ScheduleExpression": "rate(7 days)"},
	})
	for _, days := range []any{"2", "1.5", "a week", 1001.0} {
		if _, err := build(map[string]any{"keyRotationDays": days}, placeholder); err == nil || !strings.Contains(err.Error(), "keyRotationDays") {
			t.Errorf("keyRotationDays %v: err = %v", days, err)
		}
	}
	if _, err := build(map[string]any{"keyRotationZip": "absent.zip"}, Config{}); err == nil || !strings.Contains(err.Error(), "make functions") {
		t.Errorf("no package, no placeholder: err = %v", err)
	}
}

// logicalID is the one resource of type typ whose properties match.
func logicalID(t *testing.T, res map[string]map[string]any, typ string, match func(map[string]any) bool) string {
	t.Helper()
	var found []string
	for name, r := range res {
		if p, _ := r["Properties"].(map[string]any); r["Type"] == typ && match(p) {
			found = append(found, name)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s resources match, want 1: %v", len(found), typ, found)
	}
	return found[0]
}

// secretID is the secret whose description starts with prefix.
func secretID(t *testing.T, res map[string]map[string]any, prefix string) string {
	t.Helper()
	return logicalID(t, res, "AWS::SecretsManager::Secret", func(p map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(p["Description"]), prefix)
	})
}

// literalService is a service principal of a stack with its region set.
var literalService = regexp.MustCompile(`"secretsmanager\.[a-z0-9-]+\.amazonaws\.com"`)

// condition is st's condition, a region named in it written as an
// environment-agnostic stack's {"Ref":"AWS::Region"}.
func condition(t *testing.T, st map[string]any) string {
	if c, ok := st["Condition"]; ok {
		return " if " + literalService.ReplaceAllString(mustJSON(t, c), `{"Fn::Join":["",["secretsmanager.",{"Ref":"AWS::Region"},".amazonaws.com"]]}`)
	}
	return ""
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sortStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
