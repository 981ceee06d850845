// Command quickstart is the quickstart's providers (bucket, cdn, site) as an AWS
// Lambda function: the same providers the quickstart-provider command serves over
// HTTP, behind webhooksdk/lambda. Built by `make functions` as `bootstrap` for the
// provided.al2023 runtime. Configuration, from the function's environment:
//
//	PROVIDER_SECRETS  the endpoint's signing secret(s), whsec_..., comma-separated
//	WORK_DELAY        simulated work time per leaf (default 0, e.g. 500ms)
package main

import (
	"log/slog"
	"os"

	awslambda "github.com/aws/aws-lambda-go/lambda"

	"github.com/convergeplane/converge/examples/quickstart/provider"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/lambda"
)

func main() {
	// JSON lines, so that CloudWatch Logs Insights can query the fields.
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	secrets, delay, err := provider.FromEnv()
	if err != nil {
		log.Error("quickstart function misconfigured", "err", err)
		os.Exit(1)
	}
	h, err := lambda.New(provider.New(delay), webhooksdk.WithSecrets(secrets...), webhooksdk.WithLogger(log))
	if err != nil {
		log.Error("quickstart function misconfigured", "err", err)
		os.Exit(1)
	}
	awslambda.Start(h.Serve)
}
