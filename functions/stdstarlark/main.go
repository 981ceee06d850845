// Command stdstarlark is the stdstarlark provider (kind stdstarlark/1, a Starlark
// composer whose program is the provider config's data) as an AWS Lambda function behind
// webhooksdk/lambda. Composition is pure compute, so it fits a function: no disk, no
// network. Built by `make functions` as `bootstrap` for the provided.al2023 runtime.
// Configuration, from the function's environment:
//
//	PROVIDER_SECRETS  the endpoint's signing secret(s), whsec_..., comma-separated
package main

import (
	"log/slog"
	"os"
	"strings"

	awslambda "github.com/aws/aws-lambda-go/lambda"

	"github.com/convergeplane/converge/providers/stdstarlark"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/lambda"
)

func main() {
	// JSON lines, so that CloudWatch Logs Insights can query the fields.
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	secrets := strings.Split(os.Getenv("PROVIDER_SECRETS"), ",")
	if secrets[0] == "" {
		log.Error("stdstarlark function misconfigured: PROVIDER_SECRETS is required (whsec_...)")
		os.Exit(1)
	}
	h, err := lambda.New([]webhooksdk.Provider{stdstarlark.New("stdstarlark")},
		webhooksdk.WithSecrets(secrets...), webhooksdk.WithLogger(log))
	if err != nil {
		log.Error("stdstarlark function misconfigured", "err", err)
		os.Exit(1)
	}
	awslambda.Start(h.Serve)
}
