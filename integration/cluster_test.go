package integration

import (
	"testing"
	"time"

	"github.com/convergeplane/converge/control/cluster"
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
