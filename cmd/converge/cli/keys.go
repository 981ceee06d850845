package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/startstop"
)

// KeyRefreshIntervalDefault is how often a pod re-reads the keys' secrets
// (KEY_REFRESH_INTERVAL). The rotation function waits this plus a minute
// (keyrotation.PropagationDefault) between staging a key and making it
// current; change both together.
const KeyRefreshIntervalDefault = time.Minute

// The stage labels of a secret's versions.
const (
	stageCurrent  = "AWSCURRENT"
	stagePrevious = "AWSPREVIOUS"
	stagePending  = "AWSPENDING"
)

// keySecret is one key held in Secrets Manager (docs/operations.md, Key
// rotation): its AWSCURRENT version seals or mints, its AWSPREVIOUS and
// AWSPENDING versions still open or verify.
type keySecret struct {
	setting        string // the *_SECRET_ARN variable, for errors
	arn            string
	minLen, maxLen int
	values         map[string][]byte // by version id: a version's value never changes
}

// keyVersions is a key as its secret's stages hold it.
type keyVersions struct {
	current  []byte
	previous []byte // AWSPREVIOUS, nil if none: what a re-seal retires
	pending  []byte // AWSPENDING during a rotation, nil otherwise
	staged   string // the ids of the versions loaded per stage: any change is a rotation step
}

// versions is k's staged version ids, "" for nil.
func (k *keyVersions) versions() string {
	if k == nil {
		return ""
	}
	return k.staged
}

// accepted is what opens or verifies besides current.
func (k *keyVersions) accepted() [][]byte {
	var out [][]byte
	for _, b := range [][]byte{k.previous, k.pending} {
		if b != nil {
			out = append(out, b)
		}
	}
	return out
}

// read returns the key's staged versions, fetching only the versions it
// has not seen. A pending version without a value (RotateSecret makes it
// empty; createSecret fills it) or whose value does not parse is left out,
// and out of staged, so the value it gets later is a change: the rotation's
// testSecret step refuses a bad one, so it never becomes current.
func (s *keySecret) read(ctx context.Context, sm *secretsmanager.Client) (*keyVersions, error) {
	desc, err := sm.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String(s.arn)})
	if err != nil {
		return nil, fmt.Errorf("%s=%q: cannot read the secret: %w", s.setting, s.arn, err)
	}
	ids := map[string]string{}
	for id, stages := range desc.VersionIdsToStages {
		for _, st := range stages {
			ids[st] = id
		}
	}
	if ids[stageCurrent] == "" {
		return nil, fmt.Errorf("%s=%q: the secret has no %s version", s.setting, s.arn, stageCurrent)
	}
	if ids[stagePending] == ids[stageCurrent] {
		ids[stagePending] = ""
	}
	k := &keyVersions{}
	seen := map[string][]byte{}
	for _, v := range []struct {
		stage string
		dst   *[]byte
	}{{stageCurrent, &k.current}, {stagePrevious, &k.previous}, {stagePending, &k.pending}} {
		id := ids[v.stage]
		if id == "" {
			continue
		}
		key, err := s.value(ctx, sm, id)
		if err != nil && v.stage == stagePending {
			ids[stagePending] = "" // not loaded: its value, once there, is a change
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s=%q: the %s version %w", s.setting, s.arn, v.stage, err)
		}
		*v.dst, seen[id] = key, key
	}
	k.staged = ids[stageCurrent] + "/" + ids[stagePrevious] + "/" + ids[stagePending]
	s.values = seen
	return k, nil
}

// value is the key version id holds.
func (s *keySecret) value(ctx context.Context, sm *secretsmanager.Client, id string) ([]byte, error) {
	if key, ok := s.values[id]; ok {
		return key, nil
	}
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(s.arn), VersionId: aws.String(id)})
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", err)
	}
	if out.SecretString == nil {
		return nil, errors.New("has no string value; store the base64 key as SecretString")
	}
	key, why := parseKey(*out.SecretString, s.minLen, s.maxLen)
	if why != "" {
		return nil, errors.New(why)
	}
	return key, nil
}

// keySource is where a pod's keys come from when set by ARN.
type keySource struct {
	sm               *secretsmanager.Client
	secret, callback *keySecret // nil: that key is not set by ARN
	initial          keySet     // as read at start
}

// keySet is both keys as read; nil where not set by ARN.
type keySet struct{ secret, callback *keyVersions }

// read reads both secrets; each error names its variable.
func (src *keySource) read(ctx context.Context) (keySet, error) {
	var ks keySet
	var errs []error
	for _, k := range []struct {
		s   *keySecret
		dst **keyVersions
	}{{src.secret, &ks.secret}, {src.callback, &ks.callback}} {
		if k.s == nil {
			continue
		}
		v, err := k.s.read(ctx, src.sm)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		*k.dst = v
	}
	return ks, errors.Join(errs...)
}

// refreshTimeoutMin bounds one refresh (the reads and a re-seal) from
// below, whatever the interval: a short interval skips ticks instead.
const refreshTimeoutMin = 30 * time.Second

// resealTicks is how many refreshes re-seal after the secret key changed:
// the one that saw it and two more, so a pass starts at least one interval
// after this pod took up the change, when every control pod has (they all
// re-read within an interval of the rotation) and none seals with the
// retired key any more.
const resealTicks = 3

// keyRefresher re-reads the keys' secrets every interval and takes up a
// change on the pod in use: the box's keys (the secret key), the
// dispatcher's (the callback key); on a control pod it re-seals what the
// retired secret key sealed. A failed read keeps the keys in use and is
// logged; the next tick tries again.
type keyRefresher struct {
	loop     startstop.Loop
	src      *keySource
	interval time.Duration
	box      *store.SecretBox // nil without a secret key
	// setTokenKeys swaps the callback keys: Dispatcher.SetTokenKeys, nil
	// on a pod that does not dispatch.
	setTokenKeys func(key []byte, previous ...[]byte) error
	store        *store.Store // set on a control pod: it re-seals
	// errors counts failed refreshes and re-seals
	// (converge_key_refresh_errors_total).
	errors  prometheus.Counter
	log     *slog.Logger
	last    keySet
	reseals int // refreshes left that re-seal
}

// Start re-reads the secrets every interval until Stop.
func (r *keyRefresher) Start(ctx context.Context) error {
	r.loop.Start(ctx, r.run)
	return nil
}

// newKeyRefreshErrors is converge_key_refresh_errors_total.
func newKeyRefreshErrors() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "converge_key_refresh_errors_total",
		Help: "Re-reads of the keys' secrets, and re-seals, that failed; the keys in use stay."})
}

// Stop stops re-reading; the keys in use stay.
func (r *keyRefresher) Stop() { r.loop.Stop() }

func (r *keyRefresher) run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.refresh(ctx)
		}
	}
}

// refresh re-reads the secrets once and takes up what changed.
func (r *keyRefresher) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(r.interval, refreshTimeoutMin))
	defer cancel()
	ks, err := r.src.read(ctx)
	if err != nil {
		r.errors.Inc()
		r.log.Error("keys: cannot re-read the keys' secrets; the keys in use stay", "err", err)
		return
	}
	if k := ks.secret; k != nil && r.box != nil && k.staged != r.last.secret.versions() {
		if err := r.box.SetKeys(k.current, k.accepted()...); err != nil {
			r.errors.Inc()
			r.log.Error("keys: the secret key's new versions do not load; the keys in use stay", "err", err)
			return
		}
		r.log.Info("keys: took up a change of "+secretKeyVar, "versions", k.staged)
		r.last.secret, r.reseals = k, resealTicks
	}
	if k := ks.callback; k != nil && r.setTokenKeys != nil && k.staged != r.last.callback.versions() {
		if err := r.setTokenKeys(k.current, k.accepted()...); err != nil {
			r.errors.Inc()
			r.log.Error("keys: the callback key's new versions do not load; the keys in use stay", "err", err)
			return
		}
		r.log.Info("keys: took up a change of "+callbackKeyVar, "versions", k.staged)
		r.last.callback = k
	}
	if r.store != nil && r.reseals > 0 && r.last.secret != nil {
		r.reseals--
		if err := reseal(ctx, r.store, r.box, r.last.secret, r.log); err != nil {
			r.errors.Inc()
			r.log.Error("keys: cannot re-seal under the current secret key; trying again next refresh", "err", err)
			r.reseals = max(r.reseals, 1)
		}
	}
}

// reseal re-seals under the current secret key what its AWSPREVIOUS version
// sealed, logging how many rows it rewrote (at debug level when none).
func reseal(ctx context.Context, st *store.Store, box *store.SecretBox, k *keyVersions, log *slog.Logger) error {
	if k.previous == nil {
		return nil
	}
	n, err := st.ResealSecrets(ctx, box, k.previous)
	level := slog.LevelInfo
	if n == 0 {
		level = slog.LevelDebug
	}
	log.Log(ctx, level, "keys: re-sealed stored secrets under the current "+secretKeyVar, "rows", n, "versions", k.staged)
	return err
}
