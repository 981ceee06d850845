package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Context keys of the key rotation, with their defaults.
const (
	// keyRotationZipContext is the rotation function's package (make
	// functions builds it).
	keyRotationZipContext = "keyRotationZip"
	keyRotationZipDefault = "../bin/functions/keyrotation-arm64.zip"
	// keyRotationDaysContext is how often each key rotates. 30 days is the
	// Secrets Manager default and a common compliance bound; it must exceed
	// the function's MIN_KEY_AGE (2 days), or every scheduled rotation is
	// refused: a superseded key must stay accepted longer than a callback
	// token lives (24 h) and than control takes to re-seal what it sealed.
	keyRotationDaysContext = "keyRotationDays"
	keyRotationDaysDefault = 30
	keyRotationDaysMin     = 3
)

// addKeyRotation rotates CONVERGE_SECRET_KEY (secretKey) and
// CONVERGE_CALLBACK_KEY (callbackKey) every keyRotationDays with the
// function in functions/keyrotation: the pods take a rotation up by
// re-reading the secrets (docs/operations.md, Key rotation), so nothing
// else is touched. The schedules wait for after (the bootstrap that writes
// the first keys) and do not rotate on deploy.
func addKeyRotation(stack awscdk.Stack, cfg Config, key awskms.Key, secretKey, callbackKey awssecretsmanager.Secret, after constructs.IConstruct) error {
	days, err := keyRotationDays(stack)
	if err != nil {
		return err
	}
	code, err := keyRotationCode(stack, cfg)
	if err != nil {
		return err
	}
	logs := awslogs.NewLogGroup(stack, jsii.String("KeyRotationLogs"), &awslogs.LogGroupProps{
		Retention: awslogs.RetentionDays_ONE_MONTH, RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	role := lambdaRole(stack, "KeyRotationRole", logs)
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions: jsii.Strings("secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue",
			"secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage"),
		Resources: jsii.Strings(*secretKey.SecretArn(), *callbackKey.SecretArn()),
	}))
	// The secrets' key, only through Secrets Manager: Decrypt to read a
	// version, GenerateDataKey to write one.
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:    jsii.Strings("kms:Decrypt", "kms:GenerateDataKey"),
		Resources:  jsii.Strings(*key.KeyArn()),
		Conditions: &map[string]any{"StringEquals": map[string]any{"kms:ViaService": "secretsmanager." + *stack.Region() + ".amazonaws.com"}},
	}))
	fn := awslambda.NewFunction(stack, jsii.String("KeyRotation"), &awslambda.FunctionProps{
		Description:  jsii.String("Rotates CONVERGE_SECRET_KEY and CONVERGE_CALLBACK_KEY (functions/keyrotation)"),
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         code,
		MemorySize:   jsii.Number(128),
		// setSecret waits up to PROPAGATION (2 minutes) for the pods.
		Timeout:  awscdk.Duration_Minutes(jsii.Number(5)),
		Role:     role,
		LogGroup: logs,
		Environment: &map[string]*string{
			"SECRET_KEY_ARN":   secretKey.SecretArn(),
			"CALLBACK_KEY_ARN": callbackKey.SecretArn(),
		},
	})
	// Handed to the schedules as a reference: given the function itself,
	// CDK would also grant secretsmanager:GetRandomPassword on "*", which
	// this function never calls (its keys come from crypto/rand). The
	// grants above and the invoke permissions below are all it gets.
	ref := awslambda.Function_FromFunctionAttributes(stack, jsii.String("KeyRotationRef"), &awslambda.FunctionAttributes{
		FunctionArn: fn.FunctionArn(), SameEnvironment: jsii.Bool(true),
	})
	for _, s := range []struct {
		id     string
		secret awssecretsmanager.Secret
	}{{"SecretKey", secretKey}, {"CallbackKey", callbackKey}} {
		// Secrets Manager may invoke it for this secret only.
		fn.AddPermission(jsii.String("Rotate"+s.id), &awslambda.Permission{
			Principal: awsiam.NewServicePrincipal(jsii.String("secretsmanager.amazonaws.com"), nil),
			SourceArn: s.secret.SecretArn(), SourceAccount: stack.Account(),
		})
		sched := s.secret.AddRotationSchedule(jsii.String("Rotation"), &awssecretsmanager.RotationScheduleOptions{
			RotationLambda:            ref,
			AutomaticallyAfter:        awscdk.Duration_Days(jsii.Number(days)),
			RotateImmediatelyOnUpdate: jsii.Bool(false),
		})
		// On fn's subtree: the invoke permissions too, which Secrets
		// Manager needs when it creates the schedule and runs testSecret.
		sched.Node().AddDependency(after, fn)
	}
	return nil
}

// keyRotationDays reads keyRotationDays from context.
func keyRotationDays(stack awscdk.Stack) (float64, error) {
	v := stack.Node().TryGetContext(jsii.String(keyRotationDaysContext))
	if v == nil {
		return keyRotationDaysDefault, nil
	}
	var days float64
	switch x := v.(type) {
	case float64:
		days = x
	case string:
		n, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0, fmt.Errorf("context %s: want a number of days", keyRotationDaysContext)
		}
		days = n
	default:
		return 0, fmt.Errorf("context %s: want a number of days", keyRotationDaysContext)
	}
	if days != float64(int(days)) || days < keyRotationDaysMin || days > 1000 {
		return 0, fmt.Errorf("context %s: want whole days from %d (the rotation function refuses to replace a key younger than 2 days) to 1000", keyRotationDaysContext, keyRotationDaysMin)
	}
	return days, nil
}

// keyRotationCode is the rotation function's package, or the stand-in the
// quickstart provider falls back to (placeholderProvider) when it has not
// been built: deployed, it fails every rotation, which changes no key.
func keyRotationCode(stack awscdk.Stack, cfg Config) (awslambda.Code, error) {
	zip := keyRotationZipDefault
	if v, ok := stack.Node().TryGetContext(jsii.String(keyRotationZipContext)).(string); ok && v != "" {
		zip = v
	}
	if _, err := os.Stat(zip); err == nil {
		return awslambda.Code_FromAsset(jsii.String(zip), nil), nil
	} else if !cfg.PlaceholderProvider {
		return nil, fmt.Errorf("key rotation package %s: %w (run `make functions`, or pass -c placeholderProvider=true to synthesize with a stand-in)", zip, err)
	}
	return awslambda.Code_FromAsset(jsii.String("placeholder-provider"), nil), nil
}
