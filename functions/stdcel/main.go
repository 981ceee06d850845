// Command stdcel is the stdcel provider (kind stdcel/1, a CEL resource graph held in
// the provider config) as an AWS Lambda function behind webhooksdk/lambda: pure
// compute, no state between invocations but the compiled-graph cache a warm function
// keeps. Built by `make functions` as `bootstrap` for the provided.al2023 runtime.
// Configuration, from the function's environment:
//
//	PROVIDER_SECRETS  the endpoint's signing secret(s), whsec_..., comma-separated
package main

import (
	"github.com/convergeplane/converge/providers/stdcel"
	"github.com/convergeplane/converge/webhooksdk/lambda"
)

func main() { lambda.Main("stdcel", stdcel.New("stdcel")) }
