package api

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/startstop"
)

// EventChannels maps each topic of the change stream to the NOTIFY
// channels that wake it. A topic names what a page should re-read:
// resources (a task was queued, outcomes were applied, or a composition
// is about to be),
// kinds, providerconfigs, bindings (reactor bindings), endpoints, cluster
// (a member joined or left).
var EventChannels = map[string][]string{
	"resources":       {"work_ready", "outcomes_applied", "outbox_ready"},
	"kinds":           {store.KindManifestChannel},
	"providerconfigs": {"providerconfig_changed"},
	"bindings":        {"reactor_bindings_changed"},
	"endpoints":       {"endpoints_changed"},
	"cluster":         {"cluster_changed"},
}

// EventHubConfig tunes an EventHub. Zero fields take the defaults.
type EventHubConfig struct {
	// Interval is the least time between two change events: wakes within it
	// are merged into one. Defaults to 500ms.
	Interval time.Duration
	// Settle repeats a burst's topics once this long after its last wake.
	// An outbox_ready wake precedes what it announces (the drainer applies
	// the compositions it announced after the NOTIFY), so a page that
	// re-read at once could miss the last of them. Defaults to 1s.
	Settle time.Duration
	// KeepAlive is how often an idle stream sends a comment, so that
	// proxies keep it open and a client that left is noticed. Defaults to
	// 15s.
	KeepAlive time.Duration
	// MaxStreams caps the open streams; one more is refused with 503.
	// Defaults to 256.
	MaxStreams int
}

// The EventHubConfig defaults.
const (
	EventIntervalDefault   = 500 * time.Millisecond
	EventSettleDefault     = time.Second
	EventKeepAliveDefault  = 15 * time.Second
	EventMaxStreamsDefault = 256
)

// EventHub turns the database's NOTIFY wakes into server-sent events for
// every open console: one LISTEN connection (the process's store.Listener)
// serves all streams, and a stream costs the database nothing between
// changes. An event carries the topics that changed, never data: the page
// re-reads what it shows through the API, as a listener re-reads on a wake.
type EventHub struct {
	cfg   EventHubConfig
	wakes map[string][]<-chan struct{} // by topic
	loop  startstop.Loop
	done  chan struct{} // closed when the hub stops: every stream ends

	mu      sync.Mutex
	streams map[*stream]struct{}
	stopped bool
}

// stream is one open client: the topics it has not been sent yet.
type stream struct {
	mu      sync.Mutex
	pending map[string]bool
	signal  chan struct{}
}

// NewEventHub subscribes to every channel of EventChannels through
// subscribe (a store.Listener's Subscribe, called before the listener
// starts).
func NewEventHub(cfg EventHubConfig, subscribe func(channel string) <-chan struct{}) *EventHub {
	cfg.Interval = cmp.Or(cfg.Interval, EventIntervalDefault)
	cfg.Settle = cmp.Or(cfg.Settle, EventSettleDefault)
	cfg.KeepAlive = cmp.Or(cfg.KeepAlive, EventKeepAliveDefault)
	cfg.MaxStreams = cmp.Or(cfg.MaxStreams, EventMaxStreamsDefault)
	h := &EventHub{cfg: cfg, wakes: map[string][]<-chan struct{}{}, done: make(chan struct{}), streams: map[*stream]struct{}{}}
	for topic, channels := range EventChannels {
		for _, ch := range channels {
			h.wakes[topic] = append(h.wakes[topic], subscribe(ch))
		}
	}
	return h
}

// Start begins forwarding wakes to the streams.
func (h *EventHub) Start(ctx context.Context) error {
	h.loop.Start(ctx, h.run)
	return nil
}

// Stop ends every open stream and the forwarding; the server's shutdown
// waits for open responses, so stop the hub first. Safe to call twice.
func (h *EventHub) Stop() {
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		close(h.done)
	}
	h.mu.Unlock()
	h.loop.Stop()
}

// Running reports whether the hub forwards wakes (for readiness).
func (h *EventHub) Running() bool { return h.loop.Running() }

func (h *EventHub) run(ctx context.Context) {
	woken := make(chan string, len(h.wakes))
	var wg sync.WaitGroup
	for topic, chans := range h.wakes {
		for _, ch := range chans {
			wg.Go(func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-ch:
						select {
						case woken <- topic:
						case <-ctx.Done():
							return
						}
					}
				}
			})
		}
	}
	defer wg.Wait()

	var (
		pending, settling = map[string]bool{}, map[string]bool{}
		flush, settle     *time.Timer
		flushC, settleC   <-chan time.Time
		last              time.Time
	)
	stop := func(t *time.Timer) {
		if t != nil {
			t.Stop()
		}
	}
	defer func() { stop(flush); stop(settle) }()
	for {
		select {
		case <-ctx.Done():
			return
		case topic := <-woken:
			pending[topic], settling[topic] = true, true
			if flushC == nil {
				flush = time.NewTimer(max(0, time.Until(last.Add(h.cfg.Interval))))
				flushC = flush.C
			}
			stop(settle)
			settle = time.NewTimer(h.cfg.Settle)
			settleC = settle.C
		case <-flushC:
			h.broadcast(pending)
			clear(pending)
			last, flushC = time.Now(), nil
		case <-settleC:
			h.broadcast(settling)
			clear(settling)
			settleC = nil
		}
	}
}

// broadcast hands topics to every stream without waiting on any: a slow
// client's unsent topics merge into its next event.
func (h *EventHub) broadcast(topics map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.streams {
		st.mu.Lock()
		maps.Copy(st.pending, topics)
		st.mu.Unlock()
		startstop.Wake(st.signal)
	}
}

func (h *EventHub) open() *stream {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || len(h.streams) >= h.cfg.MaxStreams {
		return nil
	}
	st := &stream{pending: map[string]bool{}, signal: make(chan struct{}, 1)}
	h.streams[st] = struct{}{}
	return st
}

func (h *EventHub) close(st *stream) {
	h.mu.Lock()
	delete(h.streams, st)
	h.mu.Unlock()
}

// Streams is the number of open streams.
func (h *EventHub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.streams)
}

// ChangeEvent is the data of a change event of the stream.
type ChangeEvent struct {
	Topics []string `json:"topics"`
}

// serve answers GET /api/v1/events/stream: text/event-stream, an open
// event first, then a change event whenever topics changed, and a comment
// every KeepAlive. It is registered on Fiber directly (huma buffers bodies)
// behind the same token check as every read route. The server's write
// timeout would cut a stream that outlives it: each write moves the
// connection's write deadline writeTimeout on instead, so only a client
// that stops reading loses its stream.
// handler serves the stream. namespace checks its one parameter,
// ?namespace= (a namespace or *, as a list takes it): an event names
// topics, never objects, so every namespace's stream carries the same
// events, and the page re-reads its namespace's objects through the API.
func (h *EventHub) handler(writeTimeout time.Duration, namespace func(context.Context, string) (string, *Problem)) fiber.Handler {
	return func(c *fiber.Ctx) error { return h.serve(c, writeTimeout, namespace) }
}

func (h *EventHub) serve(c *fiber.Ctx, writeTimeout time.Duration, namespace func(context.Context, string) (string, *Problem)) error {
	for k, v := range c.Request().URI().QueryArgs().All() {
		name := string(k)
		if name == "namespace" {
			if _, p := namespace(c.UserContext(), string(v)); p != nil {
				return writeProblem(c, p)
			}
			continue
		}
		return writeProblem(c, newProblem(http.StatusUnprocessableEntity, typeInvalid, "query."+name+" is not a parameter of this route",
			ProblemError{Location: "query." + name, Message: "unknown query parameter"}))
	}
	st := h.open()
	if st == nil {
		return writeProblem(c, newProblem(http.StatusServiceUnavailable, typeUnavailable,
			"too many open event streams, or the server is stopping").RetryAfter(RetryAfterUnreachable))
	}
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no") // a buffering proxy would hold events back
	conn := c.Context().Conn()
	c.Context().SetBodyStreamWriter(fasthttp.StreamWriter(func(w *bufio.Writer) {
		send := func(s string) bool {
			// A connection that takes no deadline (closed) is gone.
			return conn.SetWriteDeadline(time.Now().Add(writeTimeout)) == nil && write(w, s)
		}
		defer h.close(st)
		keepAlive := time.NewTicker(h.cfg.KeepAlive)
		defer keepAlive.Stop()
		// retry: how long a browser's EventSource waits before reconnecting.
		if !send("retry: 2000\nevent: open\ndata: {}\n\n") {
			return
		}
		for {
			select {
			case <-h.done:
				return
			case <-keepAlive.C:
				if !send(": keep-alive\n\n") {
					return
				}
			case <-st.signal:
				st.mu.Lock()
				topics := slices.Sorted(maps.Keys(st.pending))
				clear(st.pending)
				st.mu.Unlock()
				if len(topics) == 0 {
					continue
				}
				data, err := json.Marshal(ChangeEvent{Topics: topics})
				if err != nil || !send("event: change\ndata: "+string(data)+"\n\n") {
					return
				}
			}
		}
	}))
	return nil
}

// write sends s at once; false when the client is gone.
func write(w *bufio.Writer, s string) bool {
	if _, err := w.WriteString(s); err != nil {
		return false
	}
	return w.Flush() == nil
}
