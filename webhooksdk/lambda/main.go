package lambda

import (
	"errors"
	"log/slog"
	"os"
	"strings"

	awslambda "github.com/aws/aws-lambda-go/lambda"

	"github.com/convergeplane/converge/webhooksdk"
)

// Main serves providers as this AWS Lambda function and never returns: a
// function's whole main. The endpoint's signing secrets come from the
// PROVIDER_SECRETS environment variable (whsec_..., comma-separated); logs
// are JSON lines on stderr, which CloudWatch Logs Insights can query. name
// says which function a misconfiguration is logged for before it exits 1.
func Main(name string, providers ...webhooksdk.Provider) {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	h, err := mainHandler(providers, os.Getenv("PROVIDER_SECRETS"), log)
	if err != nil {
		log.Error(name+" function misconfigured", "err", err)
		os.Exit(1)
	}
	awslambda.Start(h.Serve)
}

// mainHandler is Main's Handler for the secrets in env.
func mainHandler(providers []webhooksdk.Provider, env string, log *slog.Logger) (*Handler, error) {
	if env == "" {
		return nil, errors.New("PROVIDER_SECRETS is required: the endpoint's signing secret(s), whsec_..., comma-separated")
	}
	return New(providers, webhooksdk.WithSecrets(strings.Split(env, ",")...), webhooksdk.WithLogger(log))
}
