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

	"github.com/convergeplane/converge/examples/quickstart/provider"
	"github.com/convergeplane/converge/webhooksdk/lambda"
)

func main() {
	_, delay, err := provider.FromEnv()
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("quickstart function misconfigured", "err", err)
		os.Exit(1)
	}
	lambda.Main("quickstart", provider.New(delay, nil)...)
}
