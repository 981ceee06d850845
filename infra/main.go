// Command infra is the AWS CDK app that deploys Converge: run it through the
// cdk CLI (cdk.json), e.g. `make infra-synth` or `cdk deploy`. See docs/aws.md.
package main

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	cfg, err := configFromContext(app)
	if err == nil {
		props := &awscdk.StackProps{}
		// The cdk CLI sets these from the caller's credentials. The region is
		// required (the load balancer's access-log bucket policy names the
		// region's log-delivery principal); the account is optional.
		region := os.Getenv("CDK_DEFAULT_REGION")
		if region == "" {
			err = fmt.Errorf("no region: set CDK_DEFAULT_REGION (the cdk CLI sets it from the AWS profile or AWS_REGION)")
		} else {
			props.Env = &awscdk.Environment{Region: jsii.String(region)}
			if acct := os.Getenv("CDK_DEFAULT_ACCOUNT"); acct != "" {
				props.Env.Account = jsii.String(acct)
			}
			_, err = NewConvergeStack(app, ctx(app, "stackName", "Converge"), cfg, props)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
	app.Synth(nil)
}

func ctx(app awscdk.App, key, def string) string {
	// -c and CDK_CONTEXT_JSON give strings; cdk.json may hold numbers and booleans.
	switch v := app.Node().TryGetContext(jsii.String(key)).(type) {
	case string:
		if v != "" {
			return v
		}
	case float64, bool:
		return fmt.Sprint(v)
	}
	return def
}

// configFromContext reads the stack's settings; docs/aws.md lists them.
func configFromContext(app awscdk.App) (Config, error) {
	cfg := Config{
		ImageURI:             ctx(app, "imageUri", ""),
		CertificateArn:       ctx(app, "certificateArn", ""),
		DomainName:           ctx(app, "domainName", ""),
		HostedZoneID:         ctx(app, "hostedZoneId", ""),
		HostedZoneName:       ctx(app, "hostedZoneName", ""),
		ProviderZip:          ctx(app, "providerZip", "../bin/functions/quickstart-arm64.zip"),
		CloudWatchAgentImage: ctx(app, "cloudwatchAgentImage", defaultAgentImage),
		BackupWindow:         ctx(app, "backupWindow", "03:00-04:00"),
	}
	var err error
	bools := map[string]*bool{"placeholderProvider": &cfg.PlaceholderProvider, "deletionProtection": &cfg.DeletionProtection, "vpcEndpoints": &cfg.VPCEndpoints}
	defaults := map[string]string{"placeholderProvider": "false", "deletionProtection": "true", "vpcEndpoints": "true"}
	for k, p := range bools {
		if *p, err = strconv.ParseBool(ctx(app, k, defaults[k])); err != nil {
			return cfg, fmt.Errorf("context %s: %w", k, err)
		}
	}
	nums := map[string]*float64{"failedDeliveriesThreshold": &cfg.FailedDeliveriesThreshold, "queueDepthThreshold": &cfg.QueueDepthThreshold, "queueScaleOutDepth": &cfg.QueueScaleOutDepth}
	numDefaults := map[string]string{"failedDeliveriesThreshold": "25", "queueDepthThreshold": "1000", "queueScaleOutDepth": "100"}
	for k, p := range nums {
		if *p, err = strconv.ParseFloat(ctx(app, k, numDefaults[k]), 64); err != nil || *p < 0 {
			return cfg, fmt.Errorf("context %s: want a non-negative number", k)
		}
	}
	ints := map[string]*int{
		"readerCount": &cfg.ReaderCount, "backupRetentionDays": &cfg.BackupRetentionDays, "accessLogRetentionDays": &cfg.AccessLogRetentionDays,
		"controlMinTasks": &cfg.Control.Min, "controlMaxTasks": &cfg.Control.Max, "dispatchMinTasks": &cfg.Dispatch.Min, "dispatchMaxTasks": &cfg.Dispatch.Max,
	}
	intDefaults := map[string]string{
		"readerCount": "1", "backupRetentionDays": "14", "accessLogRetentionDays": "90",
		"controlMinTasks": "2", "controlMaxTasks": "6", "dispatchMinTasks": "2", "dispatchMaxTasks": "6",
	}
	for k, p := range ints {
		f, err := strconv.ParseFloat(ctx(app, k, intDefaults[k]), 64)
		if err != nil || f < 0 || f != math.Trunc(f) {
			return cfg, fmt.Errorf("context %s: want a non-negative whole number", k)
		}
		*p = int(f)
	}
	return cfg, nil
}

// defaultAgentImage is the CloudWatch agent pinned by tag (override with
// -c cloudwatchAgentImage=…).
const defaultAgentImage = "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:1.300064.0b1337"
