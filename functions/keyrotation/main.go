// Command keyrotation is the Secrets Manager rotation function of
// CONVERGE_SECRET_KEY and CONVERGE_CALLBACK_KEY (package
// internal/keyrotation). Built by `make functions` as `bootstrap` for the
// provided.al2023 runtime. Configuration, from the function's environment:
//
//	SECRET_KEY_ARN     the secret holding CONVERGE_SECRET_KEY (32 bytes)
//	CALLBACK_KEY_ARN   the secret holding CONVERGE_CALLBACK_KEY (48 bytes)
//	PROPAGATION        how long setSecret lets the pods pick up a new key (default 2m)
//	MIN_KEY_AGE        how old the current key must be to be replaced (default 48h)
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/convergeplane/converge/internal/keyrotation"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	r, err := rotator(context.Background(), os.Getenv, log)
	if err != nil {
		log.Error("keyrotation function misconfigured", "err", err)
		os.Exit(1)
	}
	lambda.Start(r.Handle)
}

// rotator builds the Rotator from the environment.
func rotator(ctx context.Context, getenv func(string) string, log *slog.Logger) (*keyrotation.Rotator, error) {
	cfg := keyrotation.Config{KeyBytes: map[string]int{}, Logger: log}
	var errs []error
	for _, s := range []struct {
		name string
		n    int
	}{{"SECRET_KEY_ARN", keyrotation.SecretKeyBytes}, {"CALLBACK_KEY_ARN", keyrotation.CallbackKeyBytes}} {
		if arn := getenv(s.name); arn != "" {
			cfg.KeyBytes[arn] = s.n
		}
	}
	if len(cfg.KeyBytes) == 0 {
		errs = append(errs, errors.New("set SECRET_KEY_ARN or CALLBACK_KEY_ARN"))
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"PROPAGATION", &cfg.Propagation}, {"MIN_KEY_AGE", &cfg.MinKeyAge}} {
		if v := getenv(d.name); v != "" {
			var err error
			if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst <= 0 {
				errs = append(errs, fmt.Errorf("%s=%q: must be a positive duration", d.name, v))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load the AWS configuration: %w", err)
	}
	return keyrotation.New(secretsmanager.NewFromConfig(awsCfg), cfg), nil
}
