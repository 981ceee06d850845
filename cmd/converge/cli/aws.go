package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"
)

// loadAWS loads the AWS configuration from the default chain (environment,
// shared files, the container or instance role). AWS_ENDPOINT_URL (or
// AWS_ENDPOINT_URL_SECRETS_MANAGER) points it at another endpoint.
func loadAWS(ctx context.Context) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, errors.New("no AWS region: set AWS_REGION")
	}
	return cfg, nil
}

// rdsIAMAuth returns the BeforeConnect hook of DB_IAM_AUTH: every new
// connection gets a fresh RDS IAM auth token as its password, since a token
// is good for 15 minutes and a pool opens connections for far longer. The
// token is signed for the connection's own host, port and user.
func rdsIAMAuth(region string, creds aws.CredentialsProvider) func(context.Context, *pgx.ConnConfig) error {
	return func(ctx context.Context, cc *pgx.ConnConfig) error {
		endpoint := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
		tok, err := auth.BuildAuthToken(ctx, endpoint, region, cc.User, creds)
		if err != nil {
			return fmt.Errorf("DB_IAM_AUTH: build the RDS auth token for %s@%s: %w", cc.User, endpoint, err)
		}
		cc.Password = tok
		return nil
	}
}

// requireTLS refuses a connection config that may fall back to plain TCP:
// an IAM token is a bearer credential and must not cross the wire in clear
// (RDS refuses it without TLS anyway).
func requireTLS(cc *pgx.ConnConfig) error {
	if cc.TLSConfig == nil {
		return errors.New("DB_IAM_AUTH needs TLS: set sslmode=require (or verify-full) in DATABASE_URL")
	}
	for _, fb := range cc.Fallbacks {
		if fb.TLSConfig == nil {
			return errors.New("DB_IAM_AUTH needs TLS without a plain fallback: set sslmode=require (or verify-full) in DATABASE_URL, not prefer or allow")
		}
	}
	return nil
}

// fetchKeys reads the keys configured by ARN (CONVERGE_SECRET_KEY_SECRET_ARN,
// CONVERGE_CALLBACK_KEY_SECRET_ARN) from Secrets Manager, once at start.
// Each secret's SecretString holds the value the plain variable would: the
// base64 key. Every error names the variable.
func (c *Config) fetchKeys(ctx context.Context) error {
	if c.SecretKeyARN == "" && c.CallbackKeyARN == "" {
		return nil
	}
	awsCfg, err := loadAWS(ctx)
	if err != nil {
		return fmt.Errorf("*_SECRET_ARN: %w", err)
	}
	sm := secretsmanager.NewFromConfig(awsCfg)
	var errs []error
	for _, k := range []struct {
		name, arn      string
		dst            *[]byte
		minLen, maxLen int
	}{
		{secretKeyVar + "_SECRET_ARN", c.SecretKeyARN, &c.SecretKey, 32, 32},
		{callbackKeyVar + "_SECRET_ARN", c.CallbackKeyARN, &c.CallbackKey, 32, 1024},
	} {
		if k.arn == "" {
			continue
		}
		out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(k.arn)})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: cannot read the secret: %w", k.name, k.arn, err))
			continue
		}
		if out.SecretString == nil {
			errs = append(errs, fmt.Errorf("%s=%q: the secret has no string value; store the base64 key as SecretString", k.name, k.arn))
			continue
		}
		key, why := parseKey(*out.SecretString, k.minLen, k.maxLen)
		if why != "" {
			errs = append(errs, fmt.Errorf("%s=%q: the secret's value %s", k.name, k.arn, why))
			continue
		}
		*k.dst = key
	}
	return errors.Join(errs...)
}
