package webhooksdk

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Defaults of the Handler options.
const (
	// SyncBudgetDefault is how long a task request waits for Work before answering 202.
	SyncBudgetDefault = 2 * time.Second
	// MaxBodyDefault caps a request body (16 MiB).
	MaxBodyDefault int64 = 16 << 20
	// HeartbeatMinDefault is the floor of the default heartbeat interval.
	HeartbeatMinDefault = time.Second
	// ResultCacheEntriesDefault bounds the finished-result cache by entries.
	ResultCacheEntriesDefault = 10_000
	// ResultCacheTTLDefault is how long a finished result is kept for duplicate deliveries.
	ResultCacheTTLDefault = 10 * time.Minute
	// ResultCacheBytesDefault bounds the finished-result cache by body bytes (64 MiB).
	ResultCacheBytesDefault = 64 << 20
	// CallbackGraceDefault is how long past the task deadline a callback is still retried.
	CallbackGraceDefault = time.Minute
	// CallbackTimeoutDefault is the per-attempt timeout of the default callback client.
	CallbackTimeoutDefault = 30 * time.Second
	// BatchConcurrencyDefault is how many tasks of one batched delivery are served at once.
	BatchConcurrencyDefault = 16
	// CallbackBatchWindowDefault is how long the first of several asynchronous Results
	// waits for others to share its batched callback.
	CallbackBatchWindowDefault = 2 * time.Millisecond
	// CallbackBatchMaxDefault caps the Results of one batched callback.
	CallbackBatchMaxDefault = 64
	// DrainTimeoutDefault is how long Serve's graceful stop waits for in-flight work.
	DrainTimeoutDefault = 30 * time.Second
	// RetryAfterUnready is the Retry-After, in seconds, of a 503 for an unready provider
	// or a shutting-down endpoint.
	RetryAfterUnready = 5
)

// Option configures [Handler], [Serve] and [ListenAndServe]. An option returns an error
// for an invalid value. The serving options ([WithDrainTimeout], [WithTLS],
// [WithMiddleware]) configure the server Serve runs, and Handler refuses them.
type Option func(*config) error

type config struct {
	secrets          []Secret
	syncBudget       time.Duration
	tolerance        time.Duration
	maxBody          int64
	client           *http.Client
	logger           *slog.Logger
	heartbeatEvery   time.Duration // 0: a third of the time left to the deadline
	now              func() time.Time
	cacheEntries     int
	cacheTTL         time.Duration
	cacheBytes       int
	callbackGrace    time.Duration
	retryInitial     time.Duration
	retryMax         time.Duration
	batchConcurrency int
	cbBatchWindow    time.Duration
	cbBatchMax       int

	// The serving options, read by Serve and ListenAndServe only.
	drainTimeout time.Duration
	tlsCert      *tls.Certificate // nil: plain HTTP
	middleware   []func(http.Handler) http.Handler
	serveOnly    []string // the serving options given, which Handler refuses
}

// newConfig is the default config with opts applied.
func newConfig(opts []Option) (config, error) {
	cfg := config{
		syncBudget:       SyncBudgetDefault,
		tolerance:        DefaultTolerance,
		maxBody:          MaxBodyDefault,
		now:              time.Now,
		cacheEntries:     ResultCacheEntriesDefault,
		cacheTTL:         ResultCacheTTLDefault,
		cacheBytes:       ResultCacheBytesDefault,
		callbackGrace:    CallbackGraceDefault,
		retryInitial:     500 * time.Millisecond,
		retryMax:         30 * time.Second,
		batchConcurrency: BatchConcurrencyDefault,
		cbBatchWindow:    CallbackBatchWindowDefault,
		cbBatchMax:       CallbackBatchMaxDefault,
		drainTimeout:     DrainTimeoutDefault,
	}
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			return config{}, err
		}
	}
	return cfg, nil
}

// serveOption is the serving option named name, whose set applies it: only Serve and
// ListenAndServe read the serving options, and Handler refuses them by name.
func serveOption(name string, set func(*config) error) Option {
	return func(c *config) error {
		if err := set(c); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		c.serveOnly = append(c.serveOnly, name)
		return nil
	}
}

// WithSecrets sets the endpoint's signing secrets ("whsec_<base64>"). Required. Give
// both the old and the new secret during a rotation: a request verifies if any of its
// signatures matches any secret.
func WithSecrets(secrets ...string) Option {
	return func(c *config) error {
		ps, err := parseSecrets(secrets)
		if err != nil {
			return fmt.Errorf("with secrets: %w", err)
		}
		c.secrets = append(c.secrets, ps...)
		return nil
	}
}

// WithSyncBudget sets how long a task request waits for Work to finish and answer inline
// (200). Past it, the request is answered 202 and the result goes to the callback.
// Defaults to SyncBudgetDefault; 0 answers 202 at once unless Work has already finished.
func WithSyncBudget(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return errors.New("with sync budget: negative duration")
		}
		c.syncBudget = d
		return nil
	}
}

// WithTolerance sets how far webhook-timestamp may be from the clock either way. Defaults
// to DefaultTolerance.
func WithTolerance(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Second {
			return errors.New("with tolerance: must be at least 1s")
		}
		c.tolerance = d
		return nil
	}
}

// WithMaxBody caps the request body; a larger one is answered 413. Defaults to
// MaxBodyDefault.
func WithMaxBody(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return errors.New("with max body: must be positive")
		}
		c.maxBody = n
		return nil
	}
}

// WithHTTPClient sets the client of every call the SDK makes to the dispatcher:
// callbacks, heartbeats and thin-payload fetches (a test injects one that plays the
// control plane, as the conformance vectors do). It should not follow redirects.
// Defaults to a client with CallbackTimeoutDefault that never follows redirects.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error {
		if hc == nil {
			return errors.New("with http client: nil client")
		}
		c.client = hc
		return nil
	}
}

// WithLogger sets the logger. Defaults to slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("with logger: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithHeartbeatEvery sets the heartbeat interval while an asynchronous Work runs.
// Defaults to a third of the time left to the task deadline when the task went
// asynchronous, and at least HeartbeatMinDefault.
func WithHeartbeatEvery(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("with heartbeat every: must be positive")
		}
		c.heartbeatEvery = d
		return nil
	}
}

// WithClock sets the clock that signature timestamps are checked against (a test
// injects a fixed one, as the conformance vectors do). Defaults to time.Now. Deadlines
// and timers always use the real clock.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("with clock: nil func")
		}
		c.now = now
		return nil
	}
}

// WithResultCache bounds the cache of finished results that answers duplicate
// deliveries (same webhook-id): at most entries results, each kept for ttl. Defaults to
// ResultCacheEntriesDefault and ResultCacheTTLDefault (and ResultCacheBytesDefault bytes
// in all).
func WithResultCache(entries int, ttl time.Duration) Option {
	return func(c *config) error {
		if entries <= 0 || ttl <= 0 {
			return errors.New("with result cache: entries and ttl must be positive")
		}
		c.cacheEntries, c.cacheTTL = entries, ttl
		return nil
	}
}

// WithCallbackRetry sets the exponential backoff between callback attempts: the first
// interval and the cap. Attempts stop at the task deadline plus grace. Defaults to 500ms,
// 30s and CallbackGraceDefault.
func WithCallbackRetry(initial, maxInterval, grace time.Duration) Option {
	return func(c *config) error {
		if initial <= 0 || maxInterval < initial || grace < 0 {
			return errors.New("with callback retry: need 0 < initial <= max and grace >= 0")
		}
		c.retryInitial, c.retryMax, c.callbackGrace = initial, maxInterval, grace
		return nil
	}
}

// WithCallbackBatch sets how asynchronous Results share a batched callback
// (docs/protocol.md §8.1) when the dispatcher offers one (Callback.BatchURL): the first
// Result waits up to window for others, and at most max go in one request. max 1 sends
// each Result on its own. Defaults to CallbackBatchWindowDefault and
// CallbackBatchMaxDefault.
func WithCallbackBatch(window time.Duration, max int) Option {
	return func(c *config) error {
		if window < 0 || max < 1 || max > MaxCallbackBatch {
			return fmt.Errorf("with callback batch: need window >= 0 and 1 <= max <= %d", MaxCallbackBatch)
		}
		c.cbBatchWindow, c.cbBatchMax = window, max
		return nil
	}
}

// WithBatchConcurrency sets how many tasks of one batched delivery (docs/protocol.md §16)
// are served at once: Work is called for at most n of them until each finishes or goes
// asynchronous, and the others wait their turn. Defaults to BatchConcurrencyDefault.
func WithBatchConcurrency(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return errors.New("with batch concurrency: must be positive")
		}
		c.batchConcurrency = n
		return nil
	}
}

// WithDrainTimeout bounds the graceful stop of [Serve]: once its context ends or a
// SIGINT or SIGTERM arrives, the listener closes, and the requests in flight, the
// asynchronous Work and its callbacks get d to finish; past it every Work context is
// cancelled (cause ErrShutdown) and Serve returns an error saying so. The dispatcher
// re-dispatches the tasks left unfinished when their leases expire. 0 cancels at once.
// Defaults to DrainTimeoutDefault. A serving option: Handler refuses it.
func WithDrainTimeout(d time.Duration) Option {
	return serveOption("with drain timeout", func(c *config) error {
		if d < 0 {
			return errors.New("negative duration")
		}
		c.drainTimeout = d
		return nil
	})
}

// WithTLS makes [Serve] serve HTTPS (HTTP/2 offered, TLS 1.2 at least) with the PEM
// certificate chain and key in certFile and keyFile, read once, when the option is
// applied. Without it Serve serves plain HTTP, for a loopback address or behind a proxy
// that terminates TLS. A serving option: Handler refuses it.
func WithTLS(certFile, keyFile string) Option {
	return serveOption("with tls", func(c *config) error {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return err
		}
		c.tlsCert = &cert
		return nil
	})
}

// WithMiddleware makes [Serve] serve the handler mw returns for the Endpoint, to add
// routes beside it (a debug page) or to see every request before it (a fault
// injector). The Endpoint answers every path it is given. Given more than once, the
// first wraps the others. A serving option: Handler refuses it.
func WithMiddleware(mw func(next http.Handler) http.Handler) Option {
	return serveOption("with middleware", func(c *config) error {
		if mw == nil {
			return errors.New("nil func")
		}
		c.middleware = append(c.middleware, mw)
		return nil
	})
}
