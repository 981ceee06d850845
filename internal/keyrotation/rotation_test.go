package keyrotation_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/convergeplane/converge/internal/keyrotation"
	krt "github.com/convergeplane/converge/internal/keyrotation/keyrotationtest"
	"github.com/convergeplane/converge/internal/testkit/awstest"
)

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
			before := krt.Value(ctx, t, sm, s.arn, keyrotation.StageCurrent)
			token := krt.Start(ctx, t, sm, s.arn)
			for _, step := range krt.Steps {
				for run := range 2 {
					if err := r.Handle(ctx, keyrotation.Event{SecretID: s.arn, ClientRequestToken: token, Step: step}); err != nil {
						t.Fatalf("rotation %d, %s run %d: %v", rotation, step, run, err)
					}
				}
				if step == "createSecret" {
					if cur := krt.Value(ctx, t, sm, s.arn, keyrotation.StageCurrent); cur != before {
						t.Fatalf("createSecret changed AWSCURRENT")
					}
				}
			}
			cur, prev := krt.Value(ctx, t, sm, s.arn, keyrotation.StageCurrent), krt.Value(ctx, t, sm, s.arn, keyrotation.StagePrevious)
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
		token := krt.Start(ctx, t, sm, secretKey)
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
		prev := krt.VersionOf(ctx, t, sm, secretKey, keyrotation.StagePrevious)
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
		token := krt.Start(ctx, t, sm, callbackKey)
		err := young.Handle(ctx, keyrotation.Event{SecretID: callbackKey, ClientRequestToken: token, Step: "createSecret"})
		if err == nil || !strings.Contains(err.Error(), "under the minimum of 48h0m0s") {
			t.Errorf("err = %v, want the minimum age refused", err)
		}
		if got := krt.StageVersion(ctx, t, sm, callbackKey, keyrotation.StagePending); got != "" {
			t.Errorf("a refused createSecret left version %s AWSPENDING", got)
		}
		// The next rotation starts.
		krt.Start(ctx, t, sm, callbackKey)
	})

	t.Run("setSecret waits for propagation", func(t *testing.T) {
		slow := keyrotation.New(sm, keyrotation.Config{KeyBytes: map[string]int{secretKey: keyrotation.SecretKeyBytes}, Propagation: time.Hour, MinKeyAge: -1})
		token := krt.Start(ctx, t, sm, secretKey)
		if err := slow.Handle(ctx, keyrotation.Event{SecretID: secretKey, ClientRequestToken: token, Step: "setSecret"}); err == nil || !strings.Contains(err.Error(), "no pending value") {
			t.Errorf("setSecret before createSecret: err = %v", err)
		}
		if err := slow.Handle(ctx, keyrotation.Event{SecretID: secretKey, ClientRequestToken: token, Step: "createSecret"}); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := slow.Handle(short, keyrotation.Event{SecretID: secretKey, ClientRequestToken: token, Step: "setSecret"}); err == nil || !strings.Contains(err.Error(), "propagate") {
			t.Errorf("err = %v, want the wait for propagation cut short", err)
		}
	})
}
