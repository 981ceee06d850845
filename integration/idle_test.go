package integration

import (
	"crypto/rand"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
)

// TestIdleServerIsQuiet: a whole server (ROLE all) with nothing to do
// commits a handful of transactions a second (heartbeat, drain and claim
// polls, the reaper), not a loop of them. A self-sustaining wake-up loop
// (as the heartbeat's cluster_changed storm was: each beat's NOTIFY woke
// every member into beating again) shows up here as thousands of commits
// in the window.
func TestIdleServerIsQuiet(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{noDrain: true})
	key := func() []byte { b := make([]byte, 32); _, _ = rand.Read(b); return b }
	cfg := convergecli.Config{DatabaseURL: e.db.DSN, Role: convergecli.RoleAll, ListenAddr: "127.0.0.1:0",
		HealthAddr: "127.0.0.1:0", ReaperRetryWindow: 30 * time.Second, MemberID: "idle", Dev: true,
		SecretKey: key(), CallbackKey: key()}
	srv, err := convergecli.Start(t.Context(), cfg, e.log)
	must(t, err)
	t.Cleanup(func() { must(t, srv.Stop()) })

	// Statistics reach pg_stat_database when a backend flushes them: at
	// most once a second while it is busy, so a loop is counted within the
	// window; an idle backend's last few commits may be counted late.
	commits := func() int64 {
		var n int64
		must(t, e.db.Pool.QueryRow(t.Context(), `SELECT xact_commit + xact_rollback FROM pg_stat_database
			WHERE datname = current_database()`).Scan(&n))
		return n
	}
	time.Sleep(3 * time.Second) // start-up settles
	before := commits()
	const window = 5 * time.Second
	time.Sleep(window)
	if n := commits() - before; n > 500 {
		t.Errorf("an idle server committed %d transactions in %s; something is looping", n, window)
	} else {
		t.Logf("an idle server committed %d transactions in %s", n, window)
	}
}
