package integration

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/cluster"
	"github.com/convergeplane/converge/control/reaper"
)

func TestMembersTileTheShards(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{noDrain: true})
	ctx := t.Context()
	a := cluster.New(cluster.Config{MemberID: "a", Role: "all", Heartbeat: time.Hour, Info: map[string]any{"x": 1}}, e.st, nil, e.log)
	must(t, a.Start(ctx))
	if lo, hi := a.Range(); lo != 0 || hi != 255 {
		t.Fatalf("alone: range = [%d, %d], want [0, 255]", lo, hi)
	}
	b := cluster.New(cluster.Config{MemberID: "b", Role: "all", Heartbeat: time.Hour}, e.st, nil, e.log)
	must(t, b.Start(ctx))
	// a re-asks on its next beat; here, a restart stands in for the
	// cluster_changed wake.
	a.Stop()
	must(t, a.Start(ctx))
	alo, ahi := a.Range()
	blo, bhi := b.Range()
	if alo != 0 || ahi+1 != blo || bhi != 255 {
		t.Errorf("ranges a=[%d,%d] b=[%d,%d] do not tile [0,255]", alo, ahi, blo, bhi)
	}
	members, err := e.st.ListClusterMembers(ctx, time.Minute)
	must(t, err)
	if len(members) != 2 || !members[0].Ready {
		t.Errorf("members = %+v, want 2 ready", members)
	}
	a.Stop()
	b.Stop()
	members, err = e.st.ListClusterMembers(ctx, time.Minute)
	must(t, err)
	if len(members) != 0 {
		t.Errorf("after Stop, %d members remain registered", len(members))
	}
}

// TestReaperForgetsDeadMembers: a member that died without leaving stays
// in the view, not ready, until MemberRetention; then the reaper drops it.
func TestReaperForgetsDeadMembers(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{noDrain: true})
	ctx := t.Context()
	live := cluster.New(cluster.Config{MemberID: "live", Role: "all", Heartbeat: time.Hour}, e.st, nil, e.log)
	must(t, live.Start(ctx))
	defer live.Stop()
	_, err := e.db.Pool.Exec(ctx, `INSERT INTO cluster_members (member_id, role, last_heartbeat)
		VALUES ('crashed-recently', 'all', now() - interval '10 minutes'), ('crashed-long-ago', 'all', now() - interval '2 hours')`)
	must(t, err)
	must(t, e.newReaper(reaper.Config{}).RunOnce(ctx))
	members, err := e.st.ListClusterMembers(ctx, time.Minute)
	must(t, err)
	var ids []string
	for _, m := range members {
		ids = append(ids, m.MemberID)
	}
	if !slices.Equal(ids, []string{"crashed-recently", "live"}) {
		t.Errorf("members after the reaper = %q, want the live one and the one dead for less than an hour", ids)
	}
}

// TestClusterChangedOnlyOnMembershipChange: a member re-asks for its range
// when another joins (cluster_changed), and a heartbeat, which changes no
// membership, wakes no one: before migration 00011 every beat notified,
// every member re-beat, and an idle server beat thousands of times a
// second.
func TestClusterChangedOnlyOnMembershipChange(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{noDrain: true})
	ctx := t.Context()
	var beats atomic.Int64
	a := cluster.New(cluster.Config{MemberID: "a", Role: "all", Heartbeat: time.Hour,
		InFlight: func() int { beats.Add(1); return 0 }}, e.st, e.lis.Subscribe("cluster_changed"), e.log)
	e.listen()
	must(t, a.Start(ctx))
	defer a.Stop()
	// Its first beat, the wakes of its own join and of the listener's
	// connect settle; after that it has no reason to beat for an hour.
	time.Sleep(500 * time.Millisecond)
	settled := beats.Load()
	time.Sleep(time.Second)
	if n := beats.Load() - settled; n != 0 {
		t.Fatalf("an idle member with a 1h heartbeat beat %d times in a second", n)
	}
	b := cluster.New(cluster.Config{MemberID: "b", Role: "all", Heartbeat: time.Hour}, e.st, nil, e.log)
	must(t, b.Start(ctx))
	defer b.Stop()
	waitFor(t, 5*time.Second, "a to take half the shards once b joined", func() bool {
		lo, hi := a.Range()
		return lo == 0 && hi == 127
	})
}
