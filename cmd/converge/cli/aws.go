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
// CONVERGE_CALLBACK_KEY_SECRET_ARN) from Secrets Manager: each secret's
// AWSCURRENT version becomes the key, its AWSPREVIOUS and AWSPENDING
// versions the previous keys that still open and verify. Each version's
// SecretString holds the value the plain variable would: the base64 key.
// Every error names the variable. It returns the source the pod re-reads
// the keys from (nil when neither is set by ARN).
func (c *Config) fetchKeys(ctx context.Context) (*keySource, error) {
	if c.SecretKeyARN == "" && c.CallbackKeyARN == "" {
		return nil, nil
	}
	awsCfg, err := loadAWS(ctx)
	if err != nil {
		return nil, fmt.Errorf("*_SECRET_ARN: %w", err)
	}
	src := &keySource{sm: secretsmanager.NewFromConfig(awsCfg)}
	if c.SecretKeyARN != "" {
		src.secret = &keySecret{setting: secretKeyVar + "_SECRET_ARN", arn: c.SecretKeyARN, minLen: 32, maxLen: 32}
	}
	if c.CallbackKeyARN != "" {
		src.callback = &keySecret{setting: callbackKeyVar + "_SECRET_ARN", arn: c.CallbackKeyARN, minLen: 32, maxLen: 1024}
	}
	ks, err := src.read(ctx)
	if err != nil {
		return nil, err
	}
	src.initial = ks
	if ks.secret != nil {
		c.SecretKey, c.PreviousSecretKeys = ks.secret.current, ks.secret.accepted()
	}
	if ks.callback != nil {
		c.CallbackKey, c.PreviousCallbackKeys = ks.callback.current, ks.callback.accepted()
	}
	return src, nil
}
