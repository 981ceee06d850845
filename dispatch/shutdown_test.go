package dispatch_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch"
)

// TestStopRenewsLeasesWhileDraining: a drain timeout longer than the lease
// keeps the delivery's claim: its lease is renewed while Stop waits, so the
// reaper cannot hand the task to another pod meanwhile.
func TestStopRenewsLeasesWhileDraining(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })}
	s.set(rec)
	d := e.dispatcher(dispatch.Config{Lease: 3 * time.Second, DrainTimeout: 6 * time.Second})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})
	waitFor(t, 10*time.Second, "the delivery to start", func() bool { return len(rec.seen()) == 1 })
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		d.Stop()
	}()
	time.Sleep(4 * time.Second) // past the 3 s lease the claim had when Stop began
	if n := e.count(`SELECT count(*) FROM work_queue WHERE resource_id = $1 AND state = 'claimed' AND lease_until > now()`, id); n != 1 {
		t.Error("while Stop drains, the delivery's lease lapsed")
	}
	<-stopped
	if n := e.count(`SELECT count(*) FROM work_queue WHERE resource_id = $1 AND state = 'pending' AND attempts = 0`, id); n != 1 {
		t.Fatal("after the drain timeout the task was not released")
	}
}
