package cli

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/convergeplane/converge/internal/testkit/awstest"
)

// TestDBIAMAuth: with DB_IAM_AUTH every new connection gets a fresh RDS
// auth token, signed for its own host, port and user, as its password; a
// DATABASE_URL that may connect without TLS is refused.
func TestDBIAMAuth(t *testing.T) {
	awstest.StaticCredentials(t)
	ctx := t.Context()
	cfg := Config{DatabaseURL: "postgres://converge@db.example.internal:5433/converge?sslmode=require", DBIAMAuth: true}
	pcfg, err := poolConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if pcfg.BeforeConnect == nil {
		t.Fatal("no BeforeConnect hook")
	}
	var tokens []string
	for range 2 {
		cc := pcfg.ConnConfig.Copy()
		if err := pcfg.BeforeConnect(ctx, cc); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, cc.Password)
		time.Sleep(1100 * time.Millisecond) // a new signing second: a new token
	}
	for _, tok := range tokens {
		host, query, ok := strings.Cut(tok, "?")
		if !ok || host != "db.example.internal:5433" {
			t.Fatalf("token %q is not for db.example.internal:5433", tok)
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		if q.Get("Action") != "connect" || q.Get("DBUser") != "converge" || q.Get("X-Amz-Signature") == "" ||
			!strings.HasPrefix(q.Get("X-Amz-Credential"), "AKIDTEST/") || !strings.HasSuffix(q.Get("X-Amz-Credential"), "/"+awstest.Region+"/rds-db/aws4_request") {
			t.Errorf("token query = %v", q)
		}
	}
	if tokens[0] == tokens[1] {
		t.Error("two connections got the same token")
	}
	for _, dsn := range []string{"postgres://converge@db/converge?sslmode=disable", "postgres://converge@db/converge?sslmode=prefer"} {
		if _, err := poolConfig(ctx, Config{DatabaseURL: dsn, DBIAMAuth: true}); err == nil || !strings.Contains(err.Error(), "DB_IAM_AUTH needs TLS") {
			t.Errorf("%s: err = %v, want DB_IAM_AUTH needs TLS", dsn, err)
		}
	}
}

// TestDBIAMAuthReadPool: with DB_IAM_AUTH the read pool (DATABASE_READ_URL)
// mints its tokens as the primary's pools do, each for the replica's own
// host and user, under the API's timeouts and a connect timeout; a
// DATABASE_READ_URL that may connect without TLS is refused.
func TestDBIAMAuthReadPool(t *testing.T) {
	awstest.StaticCredentials(t)
	ctx := t.Context()
	cfg := Config{DatabaseURL: "postgres://converge@db.example.internal:5433/converge?sslmode=require", DBIAMAuth: true,
		DatabaseReadURL: "postgres://reader@db-ro.example.internal:5432/converge?sslmode=verify-full"}
	pcfg, err := poolConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	read, err := (&Server{cfg: cfg}).openReadPool(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer read.Close()
	rc := read.Config()
	if rc.BeforeConnect == nil {
		t.Fatal("the read pool has no BeforeConnect hook")
	}
	cc := rc.ConnConfig.Copy()
	if err := rc.BeforeConnect(ctx, cc); err != nil {
		t.Fatal(err)
	}
	host, query, _ := strings.Cut(cc.Password, "?")
	if q, err := url.ParseQuery(query); err != nil || host != "db-ro.example.internal:5432" || q.Get("DBUser") != "reader" || q.Get("Action") != "connect" {
		t.Errorf("read pool token %q: want one for reader at db-ro.example.internal:5432", cc.Password)
	}
	if rc.ConnConfig.ConnectTimeout != ReadConnectTimeoutDefault || rc.ConnConfig.RuntimeParams["statement_timeout"] != "10000" {
		t.Errorf("read pool connect timeout %s, statement_timeout %q: want %s and the API's 10000 ms",
			rc.ConnConfig.ConnectTimeout, rc.ConnConfig.RuntimeParams["statement_timeout"], ReadConnectTimeoutDefault)
	}
	cfg.DatabaseReadURL = "postgres://reader@db-ro.example.internal/converge?sslmode=prefer"
	if _, err := (&Server{cfg: cfg}).openReadPool(ctx, pcfg); err == nil || !strings.Contains(err.Error(), "DATABASE_READ_URL") {
		t.Errorf("a read URL without required TLS under DB_IAM_AUTH: err = %v, want a refusal naming DATABASE_READ_URL", err)
	}
}

// TestKeysFromSecretsManager reads both keys by ARN from moto_server (or
// LocalStack, make test-docker); a
// missing or malformed secret fails with the variable's name.
func TestKeysFromSecretsManager(t *testing.T) {
	awstest.Start(t)
	ctx := t.Context()
	awsCfg, err := loadAWS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sm := secretsmanager.NewFromConfig(awsCfg)
	create := func(name, value string) string {
		out, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)})
		if err != nil {
			t.Fatalf("create secret %s: %v", name, err)
		}
		return *out.ARN
	}
	secretKey := []byte(strings.Repeat("s", 32))
	callbackKey := []byte(strings.Repeat("c", 48))
	c, err := LoadConfig(env(map[string]string{
		"CONVERGE_SECRET_KEY_SECRET_ARN":   create("converge/secret-key", base64.StdEncoding.EncodeToString(secretKey)),
		"CONVERGE_CALLBACK_KEY_SECRET_ARN": create("converge/callback-key", base64.StdEncoding.EncodeToString(callbackKey)+"\n"),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.fetchKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if string(c.SecretKey) != string(secretKey) || string(c.CallbackKey) != string(callbackKey) {
		t.Errorf("keys = %q, %q", c.SecretKey, c.CallbackKey)
	}

	bad := Config{SecretKeyARN: create("converge/short", base64.StdEncoding.EncodeToString([]byte("short"))),
		CallbackKeyARN: "arn:aws:secretsmanager:us-east-1:123456789012:secret:converge/missing-AbCdEf"}
	_, err = bad.fetchKeys(ctx)
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{"CONVERGE_SECRET_KEY_SECRET_ARN=", "must decode to exactly 32 bytes",
		"CONVERGE_CALLBACK_KEY_SECRET_ARN=", "cannot read the secret", "ResourceNotFoundException"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "c2hvcnQ") {
		t.Errorf("error %q quotes the secret's value", err)
	}
}

func TestKeyARNWithKeyIsRefused(t *testing.T) {
	t.Parallel()
	_, err := LoadConfig(env(map[string]string{"CONVERGE_SECRET_KEY": base64.StdEncoding.EncodeToString(make([]byte, 32)),
		"CONVERGE_SECRET_KEY_SECRET_ARN": "arn:x", "DB_IAM_AUTH": "maybe"}))
	if err == nil || !strings.Contains(err.Error(), "CONVERGE_SECRET_KEY_SECRET_ARN") || !strings.Contains(err.Error(), `DB_IAM_AUTH="maybe"`) {
		t.Errorf("err = %v", err)
	}
}
