package api

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/gofiber/fiber/v2"

	"github.com/convergeplane/converge/control/store"
)

// Idempotency keys (docs/api.md "Idempotency keys"). A POST sent with an
// Idempotency-Key header runs at most once per key: the first request
// takes the key (the database decides which, when duplicates race) and
// runs; a retry with the same key and the same request gets the first
// answer again, marked Idempotent-Replayed, without running; one sent
// while the first still runs waits for its answer. The same key with a
// different request is 422. Only a success is kept: a refusal (4xx) or a
// failure (5xx) changed nothing, so the key is freed and a retry runs
// afresh. If the first request's process stopped before it answered, its
// effect is unknown, and the key answers 409 rather than run it twice.
// Keys are per caller (bearer token) and kept for IdempotencyRetention.

// The idempotency headers.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"
)

// MaxIdempotencyKeyBytes caps an Idempotency-Key.
const MaxIdempotencyKeyBytes = 255

// idempotencyLeaseSlack is how much longer than the request timeout a
// running request keeps its key before it is presumed lost: its context
// has ended by then, so it can no longer write.
const idempotencyLeaseSlack = 10 * time.Second

// idempotencyPoll bounds the wait between two looks at a key another
// request is running.
const (
	idempotencyPollFirst = 20 * time.Millisecond
	idempotencyPollMax   = 500 * time.Millisecond
)

// idempotencyKeyParam documents the header on a POST.
func idempotencyKeyParam() *huma.Param {
	lo, hi := 1, MaxIdempotencyKeyBytes
	return &huma.Param{Name: headerIdempotencyKey, In: "header",
		Description: "Run this POST at most once: a retry with the same key and the same request gets the first answer again " +
			"(Idempotent-Replayed: true) without running; the same key with another request is 422. Keys are per bearer token, " +
			"kept 24 hours by default (IDEMPOTENCY_KEY_RETENTION).",
		Schema: &huma.Schema{Type: huma.TypeString, MinLength: &lo, MaxLength: &hi}}
}

// unkeptHeaders are the answer's headers a replay does not repeat: the
// server sets them on every answer.
var unkeptHeaders = map[string]bool{"Date": true, "Content-Length": true, "Server": true, "Connection": true,
	"Transfer-Encoding": true, "Keep-Alive": true}

// idempotency is the middleware of every POST under Prefix.
func (s *Server) idempotency(c *fiber.Ctx) error {
	raw := c.Request().Header.Peek(headerIdempotencyKey)
	if c.Method() != fiber.MethodPost || raw == nil {
		return c.Next()
	}
	key := string(raw)
	if why := checkIdempotencyKey(key); why != "" {
		return writeProblem(c, newProblem(http.StatusBadRequest, typeMalformed, "header.Idempotency-Key "+why,
			ProblemError{Location: "header." + headerIdempotencyKey, Message: why}))
	}
	if isDryRun(c) {
		return c.Next() // a dry run neither takes nor keeps a key (dryrun.go)
	}
	ctx := c.UserContext()
	p := store.IdempotencyParams{Caller: callerOf(c), Key: key, Request: fingerprint(c),
		Lease: s.cfg.RequestTimeout + idempotencyLeaseSlack, Retention: s.cfg.IdempotencyRetention}
	if s.cfg.Endpoints != nil {
		p.Box = s.cfg.Endpoints.Box
	}
	took, err := s.awaitKey(ctx, p)
	if err != nil {
		return writeProblem(c, s.problemFor(ctx, err, problemOpts{}))
	}
	switch took.State {
	case store.IdempotencyAnswered:
		return replay(c, took.Answer)
	case store.IdempotencyMismatch:
		return writeProblem(c, newProblem(http.StatusUnprocessableEntity, typeIdempotencyKeyReused,
			"this Idempotency-Key was used for a different request (another method, path, query or body); use a new key for a new request",
			ProblemError{Location: "header." + headerIdempotencyKey, Message: "was used for a different request"}))
	case store.IdempotencyRunning:
		return writeProblem(c, newProblem(http.StatusConflict, typeIdempotencyKeyInUse,
			"a request with this Idempotency-Key is still running; retry it later to get its answer",
			ProblemError{Location: "header." + headerIdempotencyKey, Message: "is in use by a request still running"}).RetryAfter(RetryAfterBusy))
	case store.IdempotencyLost:
		return writeProblem(c, newProblem(http.StatusConflict, typeIdempotencyOutcomeUnknown,
			"the first request with this Idempotency-Key stopped before it answered (its server went away), so whether it took effect is unknown; "+
				"check the object, then send the request again with a new key if it is still needed",
			ProblemError{Location: "header." + headerIdempotencyKey, Message: "its first request's outcome is unknown"}))
	}

	// This request took the key.
	if err := c.Next(); err != nil {
		// The error handler answers later: a failure, nothing kept.
		s.releaseKey(p, took)
		return err
	}
	status := c.Response().StatusCode()
	if status < 200 || status > 299 {
		s.releaseKey(p, took)
		return nil
	}
	a := store.IdempotentAnswer{Status: status, Headers: map[string]string{}, Body: append([]byte(nil), c.Response().Body()...)}
	for k, v := range c.Response().Header.All() {
		if name := string(k); !unkeptHeaders[name] {
			a.Headers[name] = string(v)
		}
	}
	// The answer is given whether or not it can be kept; a key it could
	// not be kept under answers 409 (outcome unknown) once its lease ends.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
	defer cancel()
	if err := s.store.IdempotencyFinish(fctx, p, took.Owner, a); err != nil {
		s.log.Error("api: cannot keep the answer of an idempotent request", "path", c.Path(), "err", err)
	}
	return nil
}

// awaitKey takes p's key, or waits while another request with it runs,
// until the request's own deadline.
func (s *Server) awaitKey(ctx context.Context, p store.IdempotencyParams) (store.Idempotency, error) {
	wait := idempotencyPollFirst
	for {
		took, err := s.store.IdempotencyTake(ctx, p)
		if err != nil || took.State != store.IdempotencyRunning {
			return took, err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait+time.Second {
			return took, nil // answered 409 in use: the client retries
		}
		select {
		case <-ctx.Done():
			return took, nil
		case <-time.After(wait):
		}
		wait = min(2*wait, idempotencyPollMax)
	}
}

// releaseKey frees the key of a request that changed nothing.
func (s *Server) releaseKey(p store.IdempotencyParams, took store.Idempotency) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	if err := s.store.IdempotencyRelease(ctx, p, took.Owner); err != nil {
		// The key stays taken until its lease ends; a retry then gets 409
		// (outcome unknown) instead of running.
		s.log.Error("api: cannot release an idempotency key", "err", err)
	}
}

// replay answers with a kept answer.
func replay(c *fiber.Ctx, a store.IdempotentAnswer) error {
	for k, v := range a.Headers {
		c.Set(k, v)
	}
	c.Set(headerReplayed, "true")
	return c.Status(a.Status).Send(a.Body)
}

// checkIdempotencyKey says why a key is refused: 1 to
// MaxIdempotencyKeyBytes of visible ASCII.
func checkIdempotencyKey(k string) string {
	if k == "" || len(k) > MaxIdempotencyKeyBytes {
		return "must be 1 to " + strconv.Itoa(MaxIdempotencyKeyBytes) + " characters (a UUID is a good key)"
	}
	for i := range len(k) {
		if k[i] < 0x21 || k[i] > 0x7e {
			return fmt.Sprintf("must be visible ASCII characters (byte %d is not)", i)
		}
	}
	return ""
}

// callerOf identifies who sent a request, for scoping its keys: the hash
// of its bearer token (auth has admitted it), or nothing on an open API.
func callerOf(c *fiber.Ctx) []byte {
	_, token, ok := strings.Cut(c.Get(fiber.HeaderAuthorization), " ")
	if !ok {
		return nil
	}
	sum := tokenSum(strings.TrimSpace(token))
	return sum[:]
}

// fingerprint identifies a request: its method, path and query, and body.
func fingerprint(c *fiber.Ctx) []byte {
	h := sha256.New()
	h.Write(c.Request().Header.Method())
	h.Write([]byte{0})
	h.Write(c.Request().RequestURI())
	h.Write([]byte{0})
	h.Write(c.Request().Body())
	return h.Sum(nil)
}
