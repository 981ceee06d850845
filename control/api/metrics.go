package api

import (
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// routeUnrouted is the route label of a request no route answered: an
// unknown path or method (404, 405), or one a middleware refused before
// routing (401 or 403 for its token, 400 for a malformed query string,
// 415 for its content type). Raw paths never become labels.
const routeUnrouted = "unrouted"

// useField indexes Fiber's unexported Route.use, set on a route registered
// with Use (middleware). Nothing exported tells: Fiber copies a Use route
// into each method's stack with that method as its Method. Reading the
// field by reflection only reads it; TestRouteLabel fails if a Fiber
// upgrade renames it, and until then every route would count as routed.
var useField = func() []int {
	f, ok := reflect.TypeFor[fiber.Route]().FieldByName("use")
	if !ok || f.Type.Kind() != reflect.Bool {
		return nil
	}
	return f.Index
}()

// requestMetrics count and time the API's requests by route template, so a
// resource's name or an unknown path never makes a series of its own.
type requestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRequestMetrics(r prometheus.Registerer) (*requestMetrics, error) {
	m := &requestMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Subsystem: "api", Name: "requests_total",
			Help: "API requests answered, by route template (\"" + routeUnrouted + "\" when no route answered), method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "converge", Subsystem: "api", Name: "request_duration_seconds",
			Help:    "Time to answer an API request, by route template and method. Streamed responses (the console's event stream) are counted but not timed.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14), // 0.5ms .. ~75s
		}, []string{"route", "method"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("api metrics: %w", err)
		}
	}
	return m, nil
}

// middleware observes every request once it is answered. It renders a
// handler's error through onError itself (as Fiber would after the chain
// returns), so the status it records is the one the client gets. A streamed
// body is written after the handler returns, for as long as the client
// stays, so its time says nothing and is left out.
func (m *requestMetrics) middleware(onError fiber.ErrorHandler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		if err := c.Next(); err != nil {
			if err := onError(c, err); err != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError) // as Fiber answers an error handler that fails
			}
		}
		route, method := routeLabel(c.Route()), methodLabel(c.Method())
		m.requests.WithLabelValues(route, method, strconv.Itoa(c.Response().StatusCode())).Inc()
		if !c.Response().IsBodyStream() {
			m.duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
		}
		return nil
	}
}

// routeLabel is the template of the route that answered, in the OpenAPI
// document's spelling (/api/v1/resources/{kind}/{name}), or routeUnrouted
// when only middleware ran: Fiber leaves the last matched route on the
// context, a middleware's if no route matched, and a bare fallback
// carrying the raw path (and no handlers) if none did.
func routeLabel(r *fiber.Route) string {
	if r == nil || len(r.Handlers) == 0 || (useField != nil && reflect.ValueOf(r).Elem().FieldByIndex(useField).Bool()) {
		return routeUnrouted
	}
	return routeTemplate(r.Path)
}

// routeTemplate turns a Fiber route path back into its OpenAPI form: a
// parameter (":name" at the start of a segment) becomes "{name}", and an
// escaped literal colon ("\:", see literalColons) loses its backslash.
// Wildcards ("*") stay as they are.
func routeTemplate(path string) string {
	if !strings.ContainsRune(path, ':') {
		return path
	}
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		switch {
		case path[i] == '\\' && i+1 < len(path) && path[i+1] == ':':
			b.WriteByte(':')
			i++
		case path[i] == ':' && i > 0 && path[i-1] == '/':
			end := i + 1
			for end < len(path) && path[end] != '/' {
				end++
			}
			b.WriteString("{" + path[i+1:end] + "}")
			i = end - 1
		default:
			b.WriteByte(path[i])
		}
	}
	return b.String()
}

// methodLabel returns the method as a constant, never the request's own
// bytes (Fiber's strings point into buffers it reuses, and a label value is
// kept for good); anything unusual is "other".
func methodLabel(m string) string {
	for _, known := range [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions} {
		if m == known {
			return known
		}
	}
	return "other"
}
