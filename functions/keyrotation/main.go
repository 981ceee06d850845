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
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/convergeplane/converge/internal/keyrotation"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := config(os.Getenv, log)
	if err == nil {
		var awsCfg aws.Config
		if awsCfg, err = awsconfig.LoadDefaultConfig(context.Background()); err == nil {
			lambda.Start(keyrotation.New(secretsmanager.NewFromConfig(awsCfg), cfg).Handle)
			return
		}
	}
	log.Error("keyrotation function misconfigured", "err", err)
	os.Exit(1)
}

// config reads the rotation's configuration from the environment.
func config(getenv func(string) string, log *slog.Logger) (keyrotation.Config, error) {
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
	return cfg, errors.Join(errs...)
}
