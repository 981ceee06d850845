// Package cluster registers this process in cluster_members and keeps its
// shard range current. There is no leader: assign_member_shards ranks the
// member among the live members of its role and tiles the 256 shards into
// contiguous ranges by (rank, count). A join or a graceful leave fires
// cluster_changed and every member re-asks within one NOTIFY; a crashed
// member drops out when its heartbeat ages past the liveness window. Two
// members may briefly overlap during a re-tile, which is safe: claims use
// SKIP LOCKED and outcomes are fenced by claim_epoch.
package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/startstop"
)

// NumShards is the fixed logical shard count.
const NumShards = 256

// Config describes this member. Zero fields take the defaults below.
type Config struct {
	// MemberID uniquely names this process. Defaults to host-pid.
	MemberID string
	// Role is all, control or dispatch.
	Role string
	// Version is the build version shown in the cluster view.
	Version string
	// Heartbeat is the beat interval; the liveness window is 3 beats.
	// Defaults to 10s.
	Heartbeat time.Duration
	// Info is extra runtime detail shown in the cluster view.
	Info map[string]any
	// InFlight reports the member's in-flight task count for the beat.
	InFlight func() int
}

// HeartbeatDefault is the default Heartbeat.
const HeartbeatDefault = 10 * time.Second

// Member is this process's registration and shard range.
type Member struct {
	cfg   Config
	store *store.Store
	wake  <-chan struct{}
	log   *slog.Logger
	loop  startstop.Loop
	rng   atomic.Pointer[[2]int]
}

// New returns a Member; wake is a cluster_changed subscription (nil polls).
func New(cfg Config, st *store.Store, wake <-chan struct{}, log *slog.Logger) *Member {
	if cfg.MemberID == "" {
		host, _ := os.Hostname()
		cfg.MemberID = fmt.Sprintf("%s-%d", cmp.Or(host, "converge"), os.Getpid())
	}
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, HeartbeatDefault)
	m := &Member{cfg: cfg, store: st, wake: wake, log: log}
	m.rng.Store(&[2]int{0, NumShards - 1})
	return m
}

// ID returns the member id.
func (m *Member) ID() string { return m.cfg.MemberID }

// Range returns the member's current shard range, inclusive. Until the first
// assignment it is every shard.
func (m *Member) Range() (lo, hi int) {
	r := m.rng.Load()
	return r[0], r[1]
}

// Start registers the member, takes its first range, and keeps both fresh.
func (m *Member) Start(ctx context.Context) error {
	if err := m.beat(ctx); err != nil {
		return err
	}
	m.loop.Start(ctx, m.run)
	return nil
}

// Stop deregisters the member (bounded, on a fresh context, so a wedged
// database cannot hang shutdown; the GC reclaims the row otherwise).
func (m *Member) Stop() {
	m.loop.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.store.LeaveCluster(ctx, m.cfg.MemberID); err != nil {
		m.log.Warn("could not deregister from the cluster", "err", err)
	}
}

// Running reports whether the heartbeat loop runs (for readiness).
func (m *Member) Running() bool { return m.loop.Running() }

func (m *Member) run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.wake:
		}
		if err := m.beat(ctx); err != nil && !errors.Is(err, context.Canceled) {
			m.log.Warn("cluster heartbeat failed", "err", err)
		}
	}
}

func (m *Member) beat(ctx context.Context) error {
	info, _ := json.Marshal(m.cfg.Info)
	inflight := 0
	if m.cfg.InFlight != nil {
		inflight = m.cfg.InFlight()
	}
	host, _ := os.Hostname()
	lo, hi, ok, err := m.store.Heartbeat(ctx, store.HeartbeatParams{
		MemberID: m.cfg.MemberID, Role: m.cfg.Role, Host: host, PID: os.Getpid(), Version: m.cfg.Version,
		InFlight: inflight, Info: info, Total: NumShards, Liveness: 3 * m.cfg.Heartbeat,
	})
	if err != nil {
		return err
	}
	if ok {
		old := m.rng.Load()
		if old[0] != lo || old[1] != hi {
			m.log.Info("shard range assigned", "lo", lo, "hi", hi)
			m.rng.Store(&[2]int{lo, hi})
		}
	}
	return nil
}
