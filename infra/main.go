// Command infra is the AWS CDK app that deploys Converge: run it through the
// cdk CLI (cdk.json), e.g. `make infra-synth` or `cdk deploy`. See docs/aws.md.
package main

import (
	"fmt"
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
		// The cdk CLI sets these from the caller's credentials; a bare synth
		// without them gives an environment-agnostic template.
		if acct, region := os.Getenv("CDK_DEFAULT_ACCOUNT"), os.Getenv("CDK_DEFAULT_REGION"); acct != "" && region != "" {
			props.Env = &awscdk.Environment{Account: jsii.String(acct), Region: jsii.String(region)}
		}
		_, err = NewConvergeStack(app, ctx(app, "stackName", "Converge"), cfg, props)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
	app.Synth(nil)
}

func ctx(app awscdk.App, key, def string) string {
	if v, ok := app.Node().TryGetContext(jsii.String(key)).(string); ok && v != "" {
		return v
	}
	return def
}

// configFromContext reads the stack's settings; docs/aws.md lists them.
func configFromContext(app awscdk.App) (Config, error) {
	cfg := Config{
		CertificateArn:       ctx(app, "certificateArn", ""),
		DomainName:           ctx(app, "domainName", ""),
		RepoRoot:             ctx(app, "repoRoot", ".."),
		ProviderZip:          ctx(app, "providerZip", "../bin/functions/quickstart-arm64.zip"),
		CloudWatchAgentImage: ctx(app, "cloudwatchAgentImage", defaultAgentImage),
	}
	var err error
	bools := map[string]*bool{"placeholderProvider": &cfg.PlaceholderProvider, "deletionProtection": &cfg.DeletionProtection}
	defaults := map[string]string{"placeholderProvider": "false", "deletionProtection": "true"}
	for k, p := range bools {
		if *p, err = strconv.ParseBool(ctx(app, k, defaults[k])); err != nil {
			return cfg, fmt.Errorf("context %s: %w", k, err)
		}
	}
	nums := map[string]*float64{"failedDeliveriesThreshold": &cfg.FailedDeliveriesThreshold, "queueDepthThreshold": &cfg.QueueDepthThreshold}
	numDefaults := map[string]string{"failedDeliveriesThreshold": "25", "queueDepthThreshold": "1000"}
	for k, p := range nums {
		if *p, err = strconv.ParseFloat(ctx(app, k, numDefaults[k]), 64); err != nil || *p < 0 {
			return cfg, fmt.Errorf("context %s: want a non-negative number", k)
		}
	}
	return cfg, nil
}

// defaultAgentImage is the CloudWatch agent pinned by tag (override with
// -c cloudwatchAgentImage=…).
const defaultAgentImage = "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:1.300064.0b1337"
