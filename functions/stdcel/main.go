// Command stdcel is the stdcel provider (kind stdcel/1, a CEL resource graph held in
// the provider config) as an AWS Lambda function behind webhooksdk/lambda: pure
// compute, no state between invocations but the compiled-graph cache a warm function
// keeps. Built by `make functions` as `bootstrap` for the provided.al2023 runtime.
// Configuration, from the function's environment:
//
//	PROVIDER_SECRETS  the endpoint's signing secret(s), whsec_..., comma-separated
package main

import (
	"log/slog"
	"os"
	"strings"

	awslambda "github.com/aws/aws-lambda-go/lambda"

	"github.com/convergeplane/converge/providers/stdcel"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/lambda"
)

func main() {
	// JSON lines, so that CloudWatch Logs Insights can query the fields.
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	secrets := strings.Split(os.Getenv("PROVIDER_SECRETS"), ",")
	if secrets[0] == "" {
		log.Error("stdcel function misconfigured: PROVIDER_SECRETS is required (whsec_...)")
		os.Exit(1)
	}
	h, err := lambda.New([]webhooksdk.Provider{stdcel.New("stdcel")}, webhooksdk.WithSecrets(secrets...), webhooksdk.WithLogger(log))
	if err != nil {
		log.Error("stdcel function misconfigured", "err", err)
		os.Exit(1)
	}
	awslambda.Start(h.Serve)
}
