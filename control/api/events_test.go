package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/api/apitest"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// eventsBundle is an API with its change stream, woken by a real LISTEN on
// its own database.
type eventsBundle struct {
	db   *pgtest.Database
	hub  *api.EventHub
	base string
}

func setupEvents(t *testing.T, cfg api.Config, hcfg api.EventHubConfig) *eventsBundle {
	t.Helper()
	db := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	st := store.New(db.Pool, store.Config{})
	kinds := store.NewKindCache(st, store.KindCacheConfig{}, log)
	if err := kinds.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kinds.Stop)
	lis := st.NewListener(log)
	hub := api.NewEventHub(hcfg, lis.Subscribe)
	cfg.Events = hub
	srv, err := api.New(cfg, st, kinds, log)
	if err != nil {
		t.Fatal(err)
	}
	base := apitest.Serve(t, srv)
	for _, svc := range []interface {
		Start(context.Context) error
		Stop()
	}{hub, lis} {
		if err := svc.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(svc.Stop) // before the server's shutdown, which waits for open streams
	}
	return &eventsBundle{db: db, hub: hub, base: base}
}

// sse is one open stream.
type sse struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent
}

type sseEvent struct{ name, data string }

// open opens a stream with the header hdr ("Name: value", or "") and the
// query (or "").
func (b *eventsBundle) open(t *testing.T, hdr, query string) *sse {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.base+"/api/v1/events/stream"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k, v, ok := strings.Cut(hdr, ":"); ok {
		req.Header.Set(k, strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := &sse{t: t, resp: resp, events: make(chan sseEvent, 64)}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return s
	}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				s.events <- sseEvent{name: "comment"}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return s
}

// next returns the next event that is not a comment; ok is false when the
// stream ended.
func (s *sse) next(within time.Duration) (ev sseEvent, ok bool) {
	s.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok || ev.name != "comment" {
				return ev, ok
			}
		case <-deadline:
			s.t.Fatalf("no event within %s", within)
		}
	}
}

// waitTopic waits for a change event naming topic.
func (s *sse) waitTopic(topic string, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ev, ok := s.next(time.Until(deadline))
		if !ok {
			s.t.Fatalf("the stream ended before a %q change", topic)
		}
		var c api.ChangeEvent
		if ev.name == "change" && json.Unmarshal([]byte(ev.data), &c) == nil && slices.Contains(c.Topics, topic) {
			return
		}
	}
	s.t.Fatalf("no %q change within %s", topic, within)
}

func (b *eventsBundle) post(t *testing.T, method, path, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, out)
	}
}

func TestEventStream(t *testing.T) {
	t.Parallel()
	b := setupEvents(t, api.Config{}, api.EventHubConfig{Interval: 50 * time.Millisecond, Settle: 200 * time.Millisecond})

	if bad := b.open(t, "", "?since=now"); bad.resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("?since=now answered %d, want 422", bad.resp.StatusCode)
	}
	if bad := b.open(t, "", "?namespace=nope"); bad.resp.StatusCode != http.StatusNotFound {
		t.Fatalf("?namespace=nope answered %d, want 404", bad.resp.StatusCode)
	}
	if all := b.open(t, "", "?namespace=*"); all.resp.StatusCode != http.StatusOK {
		t.Fatalf("?namespace=* answered %d, want 200", all.resp.StatusCode)
	}
	s := b.open(t, "", "?namespace=default")
	if s.resp.StatusCode != http.StatusOK || s.resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream answered %d %s", s.resp.StatusCode, s.resp.Header.Get("Content-Type"))
	}
	if ev, _ := s.next(5 * time.Second); ev.name != "open" {
		t.Fatalf("first event %q, want open", ev.name)
	}

	t.Run("AManifestIsAKindsChange", func(t *testing.T) {
		b.post(t, http.MethodPut, "/api/v1/kinds/noop/manifest",
			`{"kind_version":1,"reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`)
		s.waitTopic("kinds", 5*time.Second)
	})
	t.Run("AnApplyIsAResourcesChange", func(t *testing.T) {
		// The apply queues a reconcile: work_ready.
		b.post(t, http.MethodPost, "/api/v1/resources", `{"kind":"noop","kind_version":1,"name":"n0"}`)
		s.waitTopic("resources", 5*time.Second)
	})
	t.Run("EveryStreamHearsIt", func(t *testing.T) {
		other := b.open(t, "", "")
		if ev, _ := other.next(5 * time.Second); ev.name != "open" {
			t.Fatalf("first event %q, want open", ev.name)
		}
		b.post(t, http.MethodPost, "/api/v1/resources", `{"kind":"noop","kind_version":1,"name":"n1"}`)
		other.waitTopic("resources", 5*time.Second)
		s.waitTopic("resources", 5*time.Second)
	})
	t.Run("StopEndsTheStreams", func(t *testing.T) {
		b.hub.Stop()
		for {
			if _, ok := s.next(5 * time.Second); !ok {
				break
			}
		}
		// s has ended; the other stream's handler unregisters on its own
		// goroutine, a moment later.
		for deadline := time.Now().Add(5 * time.Second); b.hub.Streams() != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d streams still open 5s after Stop", b.hub.Streams())
			}
		}
	})
}

// TestIdleStreamCostsNoQueries holds streams open with nothing changing:
// the database sees no more transactions than in as long a window with no
// stream, however many keep-alives are sent.
func TestIdleStreamCostsNoQueries(t *testing.T) {
	t.Parallel()
	b := setupEvents(t, api.Config{}, api.EventHubConfig{KeepAlive: 100 * time.Millisecond})
	commits := func() int64 {
		var n int64
		if _, err := b.db.Pool.Exec(t.Context(), `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := b.db.Pool.QueryRow(t.Context(), `SELECT xact_commit + xact_rollback FROM pg_stat_database
			WHERE datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const window = 2 * time.Second
	before := commits()
	time.Sleep(window) // nothing to wait for: this is the baseline
	baseline := commits() - before

	var streams []*sse
	for range 3 {
		s := b.open(t, "", "")
		if ev, _ := s.next(5 * time.Second); ev.name != "open" {
			t.Fatalf("first event %q, want open", ev.name)
		}
		streams = append(streams, s)
	}
	before = commits()
	deadline := time.Now().Add(window)
	keepAlives := 0
	for time.Now().Before(deadline) {
		select {
		case ev := <-streams[0].events:
			if ev.name == "comment" {
				keepAlives++
			}
		case <-time.After(time.Until(deadline)):
		}
	}
	n := commits() - before
	t.Logf("%s: %d transactions with no stream, %d with 3 idle streams (%d keep-alives on one)", window, baseline, n, keepAlives)
	if keepAlives < 5 {
		t.Errorf("%d keep-alives in %s at a 100ms interval", keepAlives, window)
	}
	// 60 keep-alives went out: a query per keep-alive, or per stream and
	// second, would show as dozens. A few either way is the kind cache's
	// failsafe re-read and the statistics' flush lag.
	if n > baseline+5 {
		t.Errorf("3 idle streams cost %d transactions in %s, %d without them", n, window, baseline)
	}
}

func TestEventStreamAuthAndLimits(t *testing.T) {
	t.Parallel()
	b := setupEvents(t, api.Config{ReadTokens: []string{"reader"}}, api.EventHubConfig{MaxStreams: 1})
	if s := b.open(t, "", ""); s.resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a stream without a token answered %d, want 401", s.resp.StatusCode)
	}
	s := b.open(t, "Authorization: Bearer reader", "")
	if s.resp.StatusCode != http.StatusOK {
		t.Fatalf("a stream with a read token answered %d", s.resp.StatusCode)
	}
	if ev, _ := s.next(5 * time.Second); ev.name != "open" {
		t.Fatalf("first event %q, want open", ev.name)
	}
	over := b.open(t, "Authorization: Bearer reader", "")
	if over.resp.StatusCode != http.StatusServiceUnavailable ||
		!strings.HasPrefix(over.resp.Header.Get("Content-Type"), api.ProblemContentType) || over.resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a stream over MaxStreams answered %d %s", over.resp.StatusCode, over.resp.Header.Get("Content-Type"))
	}
}
