// Command stdstarlark is the stdstarlark provider (kind stdstarlark/1, a Starlark
// composer whose program is the provider config's data) as an AWS Lambda function behind
// webhooksdk/lambda. Composition is pure compute, so it fits a function: no disk, no
// network. Built by `make functions` as `bootstrap` for the provided.al2023 runtime.
// Configuration, from the function's environment:
//
//	PROVIDER_SECRETS  the endpoint's signing secret(s), whsec_..., comma-separated
package main

import (
	"github.com/convergeplane/converge/providers/stdstarlark"
	"github.com/convergeplane/converge/webhooksdk/lambda"
)

func main() { lambda.Main("stdstarlark", stdstarlark.New("stdstarlark")) }
