package dispatch_test

import (
	"net/http"
	"runtime"
	"strings"
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

// TestStopEndsDeliveryWorkers: the goroutines that run deliveries outlive
// each delivery, waiting for the next, and Stop ends every one of them. Not
// parallel: it counts the process's delivery workers, and a parallel test's
// dispatcher would have its own.
func TestStopEndsDeliveryWorkers(t *testing.T) {
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	e.sdk(s, nil, newProvider("leaf", echo))
	d := e.dispatcher(dispatch.Config{})
	e.listen()
	e.applyMany("leaf", 20)
	e.waitReady("leaf", 20, 30*time.Second)
	if deliveryWorkers() == 0 {
		t.Fatal("no delivery worker waits for the next delivery")
	}
	d.Stop()
	waitFor(t, 10*time.Second, "Stop to end the delivery workers", func() bool { return deliveryWorkers() == 0 })
}

// deliveryWorkers counts the goroutines in the dispatcher's delivery worker.
func deliveryWorkers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "dispatch.(*Dispatcher).worker(")
		}
		buf = make([]byte, 2*len(buf))
	}
}
