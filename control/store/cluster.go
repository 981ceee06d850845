package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/internal/pgrun"
)

// HeartbeatParams is one member beat.
type HeartbeatParams struct {
	MemberID, Role, Host, Version string
	PID, InFlight                 int
	Info                          json.RawMessage
	Total                         int
	Liveness                      time.Duration
}

// Heartbeat upserts the member's row and returns its assigned shard range;
// ok is false if the member is not live (which a fresh beat rules out).
func (s *Store) Heartbeat(ctx context.Context, p HeartbeatParams) (lo, hi int, ok bool, err error) {
	var l, h *int
	err = s.pool.QueryRow(ctx, `
		WITH up AS (
			INSERT INTO cluster_members (member_id, role, host, pid, version, in_flight, info, last_heartbeat)
			VALUES ($1, $2, $3, $4, $5, $6, coalesce($7::jsonb, '{}'::jsonb), now())
			ON CONFLICT (member_id) DO UPDATE SET role = EXCLUDED.role, host = EXCLUDED.host, pid = EXCLUDED.pid,
				version = EXCLUDED.version, in_flight = EXCLUDED.in_flight, info = EXCLUDED.info, last_heartbeat = now()
			RETURNING 1)
		SELECT a.lo, a.hi FROM up, assign_member_shards($1, $8, $9) a`,
		p.MemberID, p.Role, p.Host, p.PID, p.Version, p.InFlight, p.Info, p.Total, int(p.Liveness/time.Second)).Scan(&l, &h)
	if err != nil {
		return 0, 0, false, fmt.Errorf("cluster heartbeat: %w", err)
	}
	if l == nil || h == nil {
		return 0, 0, false, nil
	}
	if _, err := s.pool.Exec(ctx, `UPDATE cluster_members SET shard_lo = $2, shard_hi = $3 WHERE member_id = $1`, p.MemberID, *l, *h); err != nil {
		return 0, 0, false, fmt.Errorf("cluster heartbeat: %w", err)
	}
	return *l, *h, true, nil
}

// LeaveCluster deletes the member's row.
func (s *Store) LeaveCluster(ctx context.Context, memberID string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM cluster_members WHERE member_id = $1`, memberID); err != nil {
		return fmt.Errorf("leave cluster: %w", err)
	}
	return nil
}

// ForgetMembers deletes members whose last heartbeat is older than age:
// processes that died without leaving (a crash, a lost node), which the
// cluster view otherwise lists as not ready for ever, one more after every
// restart.
func (s *Store) ForgetMembers(ctx context.Context, age time.Duration) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM cluster_members WHERE last_heartbeat < now() - make_interval(secs => $1)`, age.Seconds())
	if err != nil {
		return 0, fmt.Errorf("forget members: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// ClusterMember is one row of the cluster view.
type ClusterMember struct {
	MemberID      string          `json:"member_id" db:"member_id"`
	Role          string          `json:"role" db:"role"`
	Host          string          `json:"host" db:"host"`
	PID           int             `json:"pid" db:"pid"`
	Version       string          `json:"version" db:"version"`
	ShardLo       *int            `json:"shard_lo,omitempty" db:"shard_lo"`
	ShardHi       *int            `json:"shard_hi,omitempty" db:"shard_hi"`
	InFlight      int             `json:"in_flight" db:"in_flight"`
	Info          json.RawMessage `json:"info,omitempty" db:"info"`
	StartedAt     time.Time       `json:"started_at" db:"started_at"`
	LastHeartbeat time.Time       `json:"last_heartbeat" db:"last_heartbeat"`
	Ready         bool            `json:"ready" db:"ready"`
}

// ListClusterMembers returns every member; Ready is derived from heartbeat
// age against the liveness window at read time.
func (s *Store) ListClusterMembers(ctx context.Context, liveness time.Duration) ([]ClusterMember, error) {
	out, err := pgrun.Collect(ctx, s.reader(ctx), pgx.RowToStructByName[ClusterMember],
		`SELECT member_id, role, host, pid, version, shard_lo, shard_hi, in_flight, info,
		started_at, last_heartbeat, last_heartbeat > now() - make_interval(secs => $1) AS ready
		FROM cluster_members ORDER BY role, member_id`, liveness.Seconds())
	if err != nil {
		return nil, fmt.Errorf("list cluster members: %w", err)
	}
	for i := range out {
		// Heartbeat writes the range as a pair; show a half-written one as none.
		if out[i].ShardLo == nil || out[i].ShardHi == nil {
			out[i].ShardLo, out[i].ShardHi = nil, nil
		}
	}
	return out, nil
}
