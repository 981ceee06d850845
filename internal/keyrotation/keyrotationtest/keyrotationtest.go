// Package keyrotationtest drives the key rotation function against
// moto_server (internal/testkit/awstest) the way Secrets Manager does.
package keyrotationtest

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

	"github.com/convergeplane/converge/internal/keyrotation"
)

// Steps are the rotation steps in the order Secrets Manager runs them.
var Steps = []string{"createSecret", "setSecret", "testSecret", "finishSecret"}

// Start stages a new version of arn AWSPENDING without a value, as
// RotateSecret does before it calls the function, and returns its token.
// moto_server, given no function to call, makes that version AWSCURRENT at
// once; Start puts the stages back as AWS leaves them.
func Start(ctx context.Context, t testing.TB, sm *secretsmanager.Client, arn string) string {
	t.Helper()
	current, previous := VersionOf(ctx, t, sm, arn, keyrotation.StageCurrent), StageVersion(ctx, t, sm, arn, keyrotation.StagePrevious)
	out, err := sm.RotateSecret(ctx, &secretsmanager.RotateSecretInput{SecretId: aws.String(arn),
		RotationRules: &smtypes.RotationRulesType{AutomaticallyAfterDays: aws.Int64(30)}})
	if err != nil {
		t.Fatal(err)
	}
	token := *out.VersionId
	var prev *string
	if previous != "" {
		prev = aws.String(previous)
	}
	for _, u := range []secretsmanager.UpdateSecretVersionStageInput{
		{VersionStage: aws.String(keyrotation.StageCurrent), MoveToVersionId: aws.String(current), RemoveFromVersionId: aws.String(token)},
		{VersionStage: aws.String(keyrotation.StagePrevious), RemoveFromVersionId: aws.String(token), MoveToVersionId: prev},
		{VersionStage: aws.String(keyrotation.StagePending), MoveToVersionId: aws.String(token)},
	} {
		u.SecretId = aws.String(arn)
		if _, err := sm.UpdateSecretVersionStage(ctx, &u); err != nil {
			t.Fatalf("put the stages back: %v", err)
		}
	}
	return token
}

// Step runs one step of the rotation to token.
func Step(ctx context.Context, t testing.TB, r *keyrotation.Rotator, arn, token, step string) {
	t.Helper()
	if err := r.Handle(ctx, keyrotation.Event{SecretID: arn, ClientRequestToken: token, Step: step}); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

// Value is the SecretString of arn's version in stage.
func Value(ctx context.Context, t testing.TB, sm *secretsmanager.Client, arn, stage string) string {
	t.Helper()
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn), VersionStage: aws.String(stage)})
	if err != nil {
		t.Fatalf("read %s: %v", stage, err)
	}
	return aws.ToString(out.SecretString)
}

// VersionOf is the version of arn in stage; it fails t if there is none.
func VersionOf(ctx context.Context, t testing.TB, sm *secretsmanager.Client, arn, stage string) string {
	t.Helper()
	id := StageVersion(ctx, t, sm, arn, stage)
	if id == "" {
		t.Fatalf("no version is %s", stage)
	}
	return id
}

// StageVersion is the version of arn in stage, "" if none.
func StageVersion(ctx context.Context, t testing.TB, sm *secretsmanager.Client, arn, stage string) string {
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
