package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
)

// KindConfig is the operator-editable runtime policy of one (kind,
// kind_version). The database seeds it from the manifest's policy on first
// publish; republishing the manifest never overwrites it.
type KindConfig struct {
	Kind        string `json:"kind" db:"kind" doc:"The kind."`
	KindVersion int    `json:"kind_version" db:"kind_version" doc:"The kind version."`
	// MaxInflight caps concurrently running tasks of this kind version
	// across the cluster. 0 means uncapped.
	MaxInflight int `json:"max_inflight" db:"max_inflight" minimum:"0" doc:"Cluster-wide cap on concurrently running tasks; 0 = uncapped."`
	// TaskDeadlineSecs bounds one task's run time. 0 means no deadline.
	TaskDeadlineSecs int `json:"task_deadline_secs" db:"task_deadline_secs" minimum:"0" doc:"Per-task deadline in seconds; 0 = none."`
	// ResyncIntervalSecs > 0 re-observes synced resources periodically.
	ResyncIntervalSecs int `json:"resync_interval_secs" db:"resync_interval_secs" minimum:"0" doc:"Drift re-observe interval in seconds; 0 = off."`
	// ResyncRecomposes also re-runs the composer on each resync.
	ResyncRecomposes bool `json:"resync_recomposes" db:"resync_recomposes" doc:"Also re-run the composer on each resync."`
	// OrphanGraceSecs keeps a composer-dropped child this long before
	// tearing it down. 0 prunes at once.
	OrphanGraceSecs int `json:"orphan_grace_secs" db:"orphan_grace_secs" minimum:"0" doc:"Grace window before a dropped child is torn down; 0 = at once."`
	// MaxTransientAttempts turns a task that failed transiently this many
	// times into a terminal failure. 0 retries forever.
	MaxTransientAttempts int       `json:"max_transient_attempts" db:"max_transient_attempts" minimum:"0" doc:"Transient failures before a task fails terminally; 0 = retry forever."`
	UpdatedAt            time.Time `json:"updated_at" db:"updated_at" readOnly:"true" doc:"When the config last changed."`
	// ResourceVersion changes on every write of the config.
	ResourceVersion int64 `json:"resource_version" db:"resource_version" readOnly:"true" doc:"Changes on every write of the config; send it back (or If-Match) to make a write conditional on it."`
}

const (
	// kindConfigCols are the columns of a KindConfig, named for its db tags.
	kindConfigCols   = `kind, kind_version, max_inflight, task_deadline_secs, resync_interval_secs, resync_recomposes, orphan_grace_secs, max_transient_attempts, updated_at, resource_version`
	kindConfigGetSQL = `SELECT ` + kindConfigCols + ` FROM kind_config WHERE kind = $1 AND kind_version = $2`
	// kindConfigUpdateSQL replaces the six fields, skipping the write (and
	// the updated_at bump) when nothing changes.
	kindConfigUpdateSQL = `WITH up AS (
    UPDATE kind_config SET max_inflight = $3, task_deadline_secs = $4, resync_interval_secs = $5,
           resync_recomposes = $6, orphan_grace_secs = $7, max_transient_attempts = $8, updated_at = clock_timestamp()
     WHERE kind = $1 AND kind_version = $2
       AND (max_inflight, task_deadline_secs, resync_interval_secs, resync_recomposes, orphan_grace_secs, max_transient_attempts)
           IS DISTINCT FROM ($3, $4, $5, $6, $7, $8)
    RETURNING ` + kindConfigCols + `)
SELECT ` + kindConfigCols + `, true AS changed FROM up
UNION ALL
SELECT ` + kindConfigCols + `, false FROM kind_config
 WHERE kind = $1 AND kind_version = $2 AND NOT EXISTS (SELECT 1 FROM up)`
)

// kindConfigUpdated is a row of kindConfigUpdateSQL: the config and whether
// the update changed it.
type kindConfigUpdated struct {
	KindConfig
	Changed bool `db:"changed"`
}

// GetKindConfig returns the runtime policy of (kind, version), or a
// *NotFoundError if no such manifest is published.
func (s *Store) GetKindConfig(ctx context.Context, kind string, version int) (KindConfig, error) {
	if !model.ValidKindVersion(version) {
		return KindConfig{}, manifestNotFound(kind, version)
	}
	c, err := pgrun.CollectOne(ctx, s.reader(ctx), pgx.RowToStructByName[KindConfig], kindConfigGetSQL, kind, version)
	if errors.Is(err, pgx.ErrNoRows) {
		return KindConfig{}, manifestNotFound(kind, version)
	}
	if err != nil {
		return KindConfig{}, fmt.Errorf("get kind config %s/%d: %w", kind, version, err)
	}
	return c, nil
}

// PutKindConfig replaces the six policy fields of c.Kind/c.KindVersion (each
// must be >= 0, else *InvalidError) and reports ApplyConfigured or, when every
// field already held its value, ApplyUnchanged. The change takes effect on
// the next claim; no restart is needed. pre makes the write conditional on
// the config's version (else *PreconditionError).
func (s *Store) PutKindConfig(ctx context.Context, c KindConfig, pre Precondition) (KindConfig, ApplyResult, error) {
	for _, f := range []struct {
		loc string
		v   int
	}{{"max_inflight", c.MaxInflight}, {"task_deadline_secs", c.TaskDeadlineSecs},
		{"resync_interval_secs", c.ResyncIntervalSecs}, {"orphan_grace_secs", c.OrphanGraceSecs},
		{"max_transient_attempts", c.MaxTransientAttempts}} {
		if f.v < 0 {
			return KindConfig{}, "", &InvalidError{Location: f.loc, Message: fmt.Sprintf("must not be negative (got %d)", f.v)}
		}
		if f.v > maxInt32 {
			return KindConfig{}, "", &InvalidError{Location: f.loc, Message: fmt.Sprintf("must be at most %d (got %d)", maxInt32, f.v)}
		}
	}
	if !model.ValidKindVersion(c.KindVersion) {
		return KindConfig{}, "", manifestNotFound(c.Kind, c.KindVersion)
	}
	var out kindConfigUpdated
	what := fmt.Sprintf("the config of %s/%d", c.Kind, c.KindVersion)
	err := s.writeIf(ctx, pre, what, kindConfigVersionLock, []any{c.Kind, c.KindVersion}, func(q writer) (err error) {
		out, err = pgrun.CollectOne(ctx, q, pgx.RowToStructByName[kindConfigUpdated], kindConfigUpdateSQL, c.Kind, c.KindVersion,
			c.MaxInflight, c.TaskDeadlineSecs, c.ResyncIntervalSecs, c.ResyncRecomposes, c.OrphanGraceSecs, c.MaxTransientAttempts)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return KindConfig{}, "", manifestNotFound(c.Kind, c.KindVersion)
	}
	if err != nil {
		return KindConfig{}, "", wrapUnlessTyped(err, "put kind config %s/%d", c.Kind, c.KindVersion)
	}
	if out.Changed {
		return out.KindConfig, ApplyConfigured, nil
	}
	return out.KindConfig, ApplyUnchanged, nil
}

// maxInt32 is the ceiling of the int columns the policy fields live in.
const maxInt32 = 1<<31 - 1
