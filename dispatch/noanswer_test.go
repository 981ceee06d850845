package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/egress/egresstest"
	"github.com/convergeplane/converge/dispatch/registry"
	"github.com/convergeplane/converge/internal/testkit/logbuf"
)

// TestNoAnswerShowsItsClass: endpoints whose host does not resolve show
// whoever reads their state — the endpoint's live status (what GET
// /endpoints/{name} serves read tokens), the reason a pair's resources park
// (the resource detail), the delivery log and the resource's last error —
// the class of the failure (dns), never the resolver's error, which names
// the pod's resolver address ("lookup x on 10.96.0.10:53"). That error is in
// the server log.
func TestNoAnswerShowsItsClass(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("probed", model.Policy{})
	e.kind("sent", model.Policy{})
	const host = "nowhere.example.net"
	for _, p := range []store.PutEndpointParams{
		{Name: "probed", Kinds: []store.EndpointKind{{Kind: "probed", KindVersion: 1}},
			Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "http://" + host + ":8080/converge"},
			Health: store.EndpointHealth{URL: "http://" + host + ":8080/health", IntervalSecs: 1}},
		{Name: "sent", Kinds: []store.EndpointKind{{Kind: "sent", KindVersion: 1}},
			Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "http://" + host + ":8080/converge"}},
	} {
		_, _, err := e.st.CreateEndpoint(e.ctx, e.box, p)
		must(t, err)
	}
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(io.MultiWriter(&logs, tlog{t}), &slog.HandlerOptions{Level: slog.LevelWarn}))
	resolver, queries := egresstest.Resolver(netip.Addr{}) // resolves no name
	d := e.dispatcher(dispatch.Config{AllowHTTP: true, Resolver: resolver, Logger: log})
	e.listen()
	id := e.apply("sent", "a", map[string]any{})

	var st registry.EndpointStatus
	waitFor(t, 20*time.Second, "the health probe to fail", func() bool {
		st, _ = d.Registry().EndpointStatus("probed")
		return st.ProbeError != ""
	})
	rows := e.awaitFailedDeliveries(t, id, 1)
	if len(rows) == 0 {
		t.Fatal("no failed delivery was recorded")
	}
	var lastError string
	waitFor(t, 20*time.Second, "the resource's failure", func() bool {
		must(t, e.db.Pool.QueryRow(context.WithoutCancel(e.ctx), `SELECT coalesce(last_error, '') FROM resources WHERE id = $1`, id).Scan(&lastError))
		return lastError != ""
	})
	_, parked := d.Registry().PairStatus("probed", 1)
	shown := map[string]string{"probe_error": st.ProbeError, "the pair's reason": st.Kinds[0].Reason, "PairStatus": parked,
		"the delivery's excerpt": rows[0].Excerpt, "the resource's last_error": lastError}
	for what, text := range shown {
		if !strings.Contains(text, "dns: "+host+" does not resolve") || strings.Contains(text, "lookup") || strings.Contains(text, ":53") {
			t.Errorf("%s = %q, want the dns class, not the resolver's error", what, text)
		}
	}
	if rows[0].Classification != "network" {
		t.Errorf("classification %q, want network", rows[0].Classification)
	}
	if queries.Load() == 0 {
		t.Fatal("the fake resolver was never asked: the test proves nothing")
	}
	waitFor(t, 20*time.Second, "the resolver's error in the log", func() bool {
		l := logs.String()
		return strings.Contains(l, "health probe got no answer") && strings.Contains(l, "delivery got no answer") &&
			strings.Contains(l, "lookup "+host)
	})
}
