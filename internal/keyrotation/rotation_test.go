package keyrotation_test

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

	"github.com/convergeplane/converge/internal/keyrotation"
	"github.com/convergeplane/converge/internal/testkit/awstest"
)

var steps = []string{"createSecret", "setSecret", "testSecret", "finishSecret"}

// TestRotation rotates both keys through the four steps against
// moto_server, each step run twice (Secrets Manager retries steps), and
// checks the stages and values after each rotation; a wrong token or stage,
// a young current key and an unknown secret are refused.
func TestRotation(t *testing.T) {
	awstest.Start(t)
	ctx := t.Context()
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sm := secretsmanager.NewFromConfig(awsCfg)
	create := func(name string, n int) string {
		out, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name),
			SecretString: aws.String(base64.StdEncoding.EncodeToString(make([]byte, n)))})
		if err != nil {
			t.Fatalf("create secret %s: %v", name, err)
		}
		return *out.ARN
	}
	secretKey := create("converge/secret-key", keyrotation.SecretKeyBytes)
	callbackKey := create("converge/callback-key", keyrotation.CallbackKeyBytes)
	other := create("converge/other", 32)
	r := keyrotation.New(sm, keyrotation.Config{KeyBytes: map[string]int{secretKey: keyrotation.SecretKeyBytes, callbackKey: keyrotation.CallbackKeyBytes},
		Propagation: -1, MinKeyAge: -1})

	for _, s := range []struct {
		arn string
		n   int
	}{{secretKey, keyrotation.SecretKeyBytes}, {callbackKey, keyrotation.CallbackKeyBytes}} {
		var values []string // AWSCURRENT after each rotation
		for rotation := range 2 {
			before := value(ctx, t, sm, s.arn, keyrotation.StageCurrent)
			token := startRotation(ctx, t, sm, s.arn)
			for _, step := range steps {
				for run := range 2 {
					if err := r.Handle(ctx, keyrotation.Event{SecretID: s.arn, ClientRequestToken: token, Step: step}); err != nil {
						t.Fatalf("rotation %d, %s run %d: %v", rotation, step, run, err)
					}
				}
				if step == "createSecret" {
					if cur := value(ctx, t, sm, s.arn, keyrotation.StageCurrent); cur != before {
						t.Fatalf("createSecret changed AWSCURRENT")
					}
				}
			}
			cur, prev := value(ctx, t, sm, s.arn, keyrotation.StageCurrent), value(ctx, t, sm, s.arn, keyrotation.StagePrevious)
			if prev != before || cur == before {
				t.Fatalf("rotation %d: AWSCURRENT %q, AWSPREVIOUS %q; want a new current and %q previous", rotation, cur, prev, before)
			}
			if k, err := base64.StdEncoding.DecodeString(cur); err != nil || len(k) != s.n {
				t.Fatalf("rotation %d: the new key %q is not the base64 of %d bytes", rotation, cur, s.n)
			}
			values = append(values, cur)
		}
		if values[0] == values[1] {
			t.Errorf("two rotations made the same key")
		}
	}

	t.Run("refused", func(t *testing.T) {
		token := startRotation(ctx, t, sm, secretKey)
		for _, c := range []struct {
			name string
			ev   keyrotation.Event
			want string
		}{
			{"unknown token", keyrotation.Event{SecretID: secretKey, ClientRequestToken: "00000000-0000-4000-8000-000000000000", Step: "createSecret"}, "has no version"},
			{"unknown step", keyrotation.Event{SecretID: secretKey, ClientRequestToken: token, Step: "dropSecret"}, "unknown step"},
			{"secret not configured", keyrotation.Event{SecretID: other, ClientRequestToken: token, Step: "createSecret"}, "not a converge key"},
			{"test before create", keyrotation.Event{SecretID: secretKey, ClientRequestToken: token, Step: "testSecret"}, "no pending value"},
		} {
			if err := r.Handle(ctx, c.ev); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
			}
		}
		// The token of a version that is only AWSPREVIOUS.
		prev := versionOf(ctx, t, sm, secretKey, keyrotation.StagePrevious)
		if err := r.Handle(ctx, keyrotation.Event{SecretID: secretKey, ClientRequestToken: prev, Step: "finishSecret"}); err == nil || !strings.Contains(err.Error(), "is not staged AWSPENDING") {
			t.Errorf("an AWSPREVIOUS version: err = %v", err)
		}
		// A pending value of the wrong length fails testSecret.
		if _, err := sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(secretKey), ClientRequestToken: aws.String(token),
			SecretString: aws.String(base64.StdEncoding.EncodeToString(make([]byte, 16))), VersionStages: []string{keyrotation.StagePending}}); err != nil {
			t.Fatal(err)
		}
		if err := r.Handle(ctx, keyrotation.Event{SecretID: secretKey, ClientRequestToken: token, Step: "testSecret"}); err == nil || !strings.Contains(err.Error(), "base64 of 32 bytes") {
			t.Errorf("a 16-byte pending key: err = %v", err)
		}
	})

	t.Run("minimum key age", func(t *testing.T) {
		young := keyrotation.New(sm, keyrotation.Config{KeyBytes: map[string]int{callbackKey: keyrotation.CallbackKeyBytes}})
		token := startRotation(ctx, t, sm, callbackKey)
		err := young.Handle(ctx, keyrotation.Event{SecretID: callbackKey, ClientRequestToken: token, Step: "createSecret"})
		if err == nil || !strings.Contains(err.Error(), "under the minimum of 48h0m0s") {
			t.Errorf("err = %v, want the minimum age refused", err)
		}
		if got := versionOf(ctx, t, sm, callbackKey, keyrotation.StagePending); got != token {
			t.Fatalf("pending version %s, want %s", got, token)
		}
		if _, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(callbackKey), VersionStage: aws.String(keyrotation.StagePending)}); err == nil {
			// moto answers a version without a value with an error; a value here means a key was staged.
			t.Errorf("a refused createSecret staged a key")
		}
	})

	t.Run("setSecret waits for propagation", func(t *testing.T) {
		slow := keyrotation.New(sm, keyrotation.Config{KeyBytes: map[string]int{secretKey: keyrotation.SecretKeyBytes}, Propagation: time.Hour, MinKeyAge: -1})
		token := startRotation(ctx, t, sm, secretKey)
		if err := slow.Handle(ctx, keyrotation.Event{SecretID: secretKey, ClientRequestToken: token, Step: "createSecret"}); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := slow.Handle(short, keyrotation.Event{SecretID: secretKey, ClientRequestToken: token, Step: "setSecret"}); err == nil || !strings.Contains(err.Error(), "propagate") {
			t.Errorf("err = %v, want the wait for propagation cut short", err)
		}
		later := keyrotation.New(sm, keyrotation.Config{KeyBytes: map[string]int{secretKey: keyrotation.SecretKeyBytes}, Propagation: time.Hour, MinKeyAge: -1,
			Now: func() time.Time { return time.Now().Add(time.Hour + time.Minute) }})
		if err := later.Handle(ctx, keyrotation.Event{SecretID: secretKey, ClientRequestToken: token, Step: "setSecret"}); err != nil {
			t.Errorf("an hour later: %v", err)
		}
	})
}

// startRotation stages a new version AWSPENDING without a value, as
// RotateSecret does before it calls the function, and returns its token.
// moto_server, given no function to call, makes that version AWSCURRENT at
// once; the stages are put back as AWS leaves them.
func startRotation(ctx context.Context, t *testing.T, sm *secretsmanager.Client, arn string) string {
	t.Helper()
	current, previous := versionOf(ctx, t, sm, arn, keyrotation.StageCurrent), stageVersion(ctx, t, sm, arn, keyrotation.StagePrevious)
	out, err := sm.RotateSecret(ctx, &secretsmanager.RotateSecretInput{SecretId: aws.String(arn),
		RotationRules: &smtypes.RotationRulesType{AutomaticallyAfterDays: aws.Int64(30)}})
	if err != nil {
		t.Fatal(err)
	}
	token := *out.VersionId
	for _, u := range []secretsmanager.UpdateSecretVersionStageInput{
		{VersionStage: aws.String(keyrotation.StageCurrent), MoveToVersionId: aws.String(current), RemoveFromVersionId: aws.String(token)},
		{VersionStage: aws.String(keyrotation.StagePrevious), RemoveFromVersionId: aws.String(token), MoveToVersionId: nilIfEmpty(previous)},
		{VersionStage: aws.String(keyrotation.StagePending), MoveToVersionId: aws.String(token)},
	} {
		u.SecretId = aws.String(arn)
		if _, err := sm.UpdateSecretVersionStage(ctx, &u); err != nil {
			t.Fatalf("put the stages back: %v", err)
		}
	}
	return token
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func value(ctx context.Context, t *testing.T, sm *secretsmanager.Client, arn, stage string) string {
	t.Helper()
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn), VersionStage: aws.String(stage)})
	if err != nil {
		t.Fatalf("read %s: %v", stage, err)
	}
	return aws.ToString(out.SecretString)
}

func versionOf(ctx context.Context, t *testing.T, sm *secretsmanager.Client, arn, stage string) string {
	t.Helper()
	id := stageVersion(ctx, t, sm, arn, stage)
	if id == "" {
		t.Fatalf("no version is %s", stage)
	}
	return id
}

// stageVersion is the version stage is on, "" if none.
func stageVersion(ctx context.Context, t *testing.T, sm *secretsmanager.Client, arn, stage string) string {
	t.Helper()
	out, err := sm.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	for id, st := range out.VersionIdsToStages {
		if slices.Contains(st, stage) {
			return id
		}
	}
	return ""
}
