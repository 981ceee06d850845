// Package keyrotation is the Secrets Manager rotation function of
// Converge's two keys, CONVERGE_SECRET_KEY (32 bytes, seals endpoint signing
// secrets at rest) and CONVERGE_CALLBACK_KEY (48 bytes, signs callback
// tokens), each stored as the standard base64 of its bytes in SecretString.
//
// Secrets Manager calls it four times per rotation, each call naming the
// version being made (ClientRequestToken), and retries a failed step; every
// step is therefore idempotent:
//
//   - createSecret stages a new random key as AWSPENDING under the token,
//     unless that version already has a value; it refuses while AWSCURRENT
//     is younger than MinKeyAge, and unlabels the empty pending version so
//     the next rotation starts afresh.
//   - setSecret has nothing to write elsewhere: the converge pods pull the
//     keys themselves, re-reading AWSCURRENT, AWSPREVIOUS and AWSPENDING every
//     KEY_REFRESH_INTERVAL. It waits Propagation, so every pod accepts the
//     new key before any pod uses it.
//   - testSecret checks the pending value decodes to the right length.
//   - finishSecret moves AWSCURRENT to the new version (Secrets Manager
//     moves AWSPREVIOUS to the version it left) and drops its AWSPENDING.
//
// docs/operations.md (Key rotation) has the reasoning and the arithmetic.
package keyrotation

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// Stage labels Secrets Manager gives a secret's versions.
const (
	StageCurrent  = "AWSCURRENT"
	StagePrevious = "AWSPREVIOUS"
	StagePending  = "AWSPENDING"
)

// Defaults of Config.
const (
	// PropagationDefault is KEY_REFRESH_INTERVAL's default (1m) plus a
	// minute for a slow refresh and clock skew.
	PropagationDefault = 2 * time.Minute
	// MinKeyAgeDefault keeps a superseded key accepted (as AWSPREVIOUS) for
	// at least two days: longer than a callback token of a task without a
	// deadline lives (24h) and than control takes to re-seal the rows the
	// old key sealed (one KEY_REFRESH_INTERVAL).
	MinKeyAgeDefault = 48 * time.Hour
)

// Key sizes, in bytes, of the two keys.
const (
	SecretKeyBytes   = 32
	CallbackKeyBytes = 48
)

// Event is what Secrets Manager sends the rotation function.
type Event struct {
	SecretID           string `json:"SecretId"`
	ClientRequestToken string `json:"ClientRequestToken"`
	Step               string `json:"Step"`
}

// API is the part of the Secrets Manager client the rotation uses.
type API interface {
	DescribeSecret(context.Context, *secretsmanager.DescribeSecretInput, ...func(*secretsmanager.Options)) (*secretsmanager.DescribeSecretOutput, error)
	GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
	PutSecretValue(context.Context, *secretsmanager.PutSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.PutSecretValueOutput, error)
	UpdateSecretVersionStage(context.Context, *secretsmanager.UpdateSecretVersionStageInput, ...func(*secretsmanager.Options)) (*secretsmanager.UpdateSecretVersionStageOutput, error)
}

// Config configures a Rotator.
type Config struct {
	// KeyBytes maps the ARN of each secret the function may rotate to the
	// length of its key. A secret not listed is refused.
	KeyBytes map[string]int
	// Propagation is how long setSecret waits once the pending key exists.
	// Defaults to PropagationDefault; negative: no wait.
	Propagation time.Duration
	// MinKeyAge is how old AWSCURRENT must be before createSecret replaces
	// it. Defaults to MinKeyAgeDefault; negative: no minimum.
	MinKeyAge time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Rotator runs the rotation steps.
type Rotator struct {
	sm  API
	cfg Config
}

// New returns a Rotator over sm.
func New(sm API, cfg Config) *Rotator {
	if cfg.Propagation == 0 {
		cfg.Propagation = PropagationDefault
	}
	if cfg.MinKeyAge == 0 {
		cfg.MinKeyAge = MinKeyAgeDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Rotator{sm: sm, cfg: cfg}
}

// Handle runs ev's step. An error fails the step; Secrets Manager retries
// it.
func (r *Rotator) Handle(ctx context.Context, ev Event) error {
	desc, err := r.sm.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String(ev.SecretID)})
	if err != nil {
		return fmt.Errorf("describe secret %s: %w", ev.SecretID, err)
	}
	arn := aws.ToString(desc.ARN)
	n, ok := r.cfg.KeyBytes[arn]
	if !ok {
		return fmt.Errorf("secret %s is not a converge key this function rotates", arn)
	}
	if !aws.ToBool(desc.RotationEnabled) {
		return fmt.Errorf("secret %s: rotation is not enabled", arn)
	}
	stages, ok := desc.VersionIdsToStages[ev.ClientRequestToken]
	if !ok {
		return fmt.Errorf("secret %s has no version %s to rotate to", arn, ev.ClientRequestToken)
	}
	if slices.Contains(stages, StageCurrent) {
		r.cfg.Logger.Info("version is already current", "secret", arn, "version", ev.ClientRequestToken, "step", ev.Step)
		return nil
	}
	if !slices.Contains(stages, StagePending) {
		return fmt.Errorf("secret %s: version %s is not staged %s", arn, ev.ClientRequestToken, StagePending)
	}
	log := r.cfg.Logger.With("secret", arn, "version", ev.ClientRequestToken, "step", ev.Step)
	switch ev.Step {
	case "createSecret":
		return r.create(ctx, log, arn, ev.ClientRequestToken, n)
	case "setSecret":
		return r.set(ctx, log, arn, ev.ClientRequestToken, n)
	case "testSecret":
		_, err := r.pending(ctx, arn, ev.ClientRequestToken, n)
		return err
	case "finishSecret":
		return r.finish(ctx, log, arn, ev.ClientRequestToken, desc.VersionIdsToStages)
	}
	return fmt.Errorf("unknown step %q", ev.Step)
}

// create stages a new key under token, once.
func (r *Rotator) create(ctx context.Context, log *slog.Logger, arn, token string, n int) error {
	if _, err := r.pending(ctx, arn, token, n); err == nil {
		log.Info("the pending key exists")
		return nil
	} else if !errors.Is(err, errNoValue) {
		return err
	}
	cur, err := r.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn), VersionStage: aws.String(StageCurrent)})
	if err != nil {
		return fmt.Errorf("read %s of %s: %w", StageCurrent, arn, err)
	}
	if age := r.cfg.Now().Sub(aws.ToTime(cur.CreatedDate)); r.cfg.MinKeyAge > 0 && age < r.cfg.MinKeyAge {
		refused := fmt.Errorf("secret %s: the current key is %s old, under the minimum of %s: the key it replaced would stop being accepted while tokens it signed or rows it sealed may remain",
			arn, age.Round(time.Second), r.cfg.MinKeyAge)
		// Unlabel the empty version, or the secret would look mid-rotation
		// and the next rotation could not start.
		if _, err := r.sm.UpdateSecretVersionStage(ctx, &secretsmanager.UpdateSecretVersionStageInput{SecretId: aws.String(arn),
			VersionStage: aws.String(StagePending), RemoveFromVersionId: aws.String(token)}); err != nil {
			return errors.Join(refused, fmt.Errorf("unlabel %s of %s: %w", StagePending, arn, err))
		}
		return refused
	}
	key := make([]byte, n)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("generate a key: %w", err)
	}
	if _, err := r.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(arn), ClientRequestToken: aws.String(token),
		SecretString: aws.String(base64.StdEncoding.EncodeToString(key)), VersionStages: []string{StagePending}}); err != nil {
		return fmt.Errorf("stage the new key of %s: %w", arn, err)
	}
	log.Info("staged a new key", "bytes", n)
	return nil
}

// set checks the pending key exists, then waits Propagation: every pod
// re-reads the secret within KEY_REFRESH_INTERVAL of the key's staging,
// which came before this call, so by then every pod accepts it. The wait
// is counted from here, not from the version's creation date, which may
// be that of the empty version RotateSecret made before createSecret ran.
func (r *Rotator) set(ctx context.Context, log *slog.Logger, arn, token string, n int) error {
	if _, err := r.pending(ctx, arn, token, n); err != nil {
		return err
	}
	if r.cfg.Propagation <= 0 {
		return nil
	}
	log.Info("waiting for every pod to accept the new key", "wait", r.cfg.Propagation)
	t := time.NewTimer(r.cfg.Propagation)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the new key of %s to propagate: %w", arn, ctx.Err())
	}
}

// errNoValue: the pending version has no value yet.
var errNoValue = errors.New("no pending value")

// pending returns the pending key, checked as the server checks it.
func (r *Rotator) pending(ctx context.Context, arn, token string, n int) ([]byte, error) {
	out, err := r.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn), VersionId: aws.String(token), VersionStage: aws.String(StagePending)})
	var nf *smtypes.ResourceNotFoundException
	switch {
	case errors.As(err, &nf):
		return nil, errNoValue
	case err != nil:
		return nil, fmt.Errorf("read %s of %s: %w", StagePending, arn, err)
	case out.SecretString == nil:
		return nil, errNoValue
	}
	key, err := base64.StdEncoding.DecodeString(*out.SecretString)
	if err != nil || len(key) != n {
		return nil, fmt.Errorf("secret %s: the pending value is not the standard base64 of %d bytes", arn, n)
	}
	return key, nil
}

// finish moves AWSCURRENT to token.
func (r *Rotator) finish(ctx context.Context, log *slog.Logger, arn, token string, versions map[string][]string) error {
	var current string
	for id, st := range versions {
		if slices.Contains(st, StageCurrent) {
			current = id
		}
	}
	if _, err := r.sm.UpdateSecretVersionStage(ctx, &secretsmanager.UpdateSecretVersionStageInput{SecretId: aws.String(arn),
		VersionStage: aws.String(StageCurrent), MoveToVersionId: aws.String(token), RemoveFromVersionId: aws.String(current)}); err != nil {
		return fmt.Errorf("make version %s of %s current: %w", token, arn, err)
	}
	// Either state ends a rotation for Secrets Manager; without the label
	// the next rotation never sees a rotation in progress.
	if _, err := r.sm.UpdateSecretVersionStage(ctx, &secretsmanager.UpdateSecretVersionStageInput{SecretId: aws.String(arn),
		VersionStage: aws.String(StagePending), RemoveFromVersionId: aws.String(token)}); err != nil {
		return fmt.Errorf("unlabel %s of %s: %w", StagePending, arn, err)
	}
	log.Info("the new key is current", "previous", current)
	return nil
}
