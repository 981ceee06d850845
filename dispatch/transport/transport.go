// Package transport carries signed deliveries to a provider endpoint: an
// HTTPS POST, the Lambda Invoke API, or a SigV4-signed Function URL, each a
// Target. The dispatcher builds and signs the envelope once per attempt; a
// Target only moves the bytes and brings back the provider's answer, so a
// new transport is one more Target, with classification, fencing and
// bookkeeping unchanged.
package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Delivery is one signed request: the JSON envelope and its Standard
// Webhooks identity and signature. A transport without HTTP headers carries
// the three values in its own framing.
type Delivery struct {
	// MsgID is the webhook-id: stable across the HTTP retries of one claim.
	MsgID string
	// Timestamp is the webhook-timestamp the signature covers.
	Timestamp time.Time
	// Signature is the webhook-signature value ("v1,…", space-separated
	// during a secret rotation).
	Signature string
	// Body is the JSON envelope.
	Body []byte
	// TraceParent is the W3C traceparent header of this attempt; empty
	// sends none.
	TraceParent string
}

// Response is the provider's answer.
type Response struct {
	// Status is the HTTP status (or the transport's equivalent).
	Status int
	// RetryAfter is the delay the provider asked for (Retry-After as
	// seconds or an HTTP date); 0 if none.
	RetryAfter time.Duration
	// Location is a redirect's target, for the failure record; never
	// followed.
	Location string
	// Body is the response body, at most the target's cap.
	Body []byte
	// Truncated reports that the body exceeded the cap and was cut.
	Truncated bool
	// FunctionError is set when a Lambda function failed instead of
	// answering (X-Amz-Function-Error); Body is then its error payload.
	FunctionError *FunctionError
}

// Target delivers to one endpoint.
//
// Deliver sends d and returns the provider's answer, whatever its status. A
// non-nil error means no answer arrived: the connection failed, the egress
// policy refused the address (errors.Is(err, egress.ErrBlocked)), or ctx
// ended (errors.Is(err, context.DeadlineExceeded) / context.Canceled).
// Implementations must honour ctx for the whole exchange, body included, and
// must be safe for concurrent use.
type Target interface {
	Deliver(ctx context.Context, d *Delivery) (*Response, error)
}

// Limited is a Target whose transport caps the request size (the Lambda
// Invoke API: 6 MB synchronous, 1 MB asynchronous); 0 means no cap. The
// dispatcher sends an envelope over the cap thin, with a payload_url; a
// delivery still over it fails with a *TooLargeError before anything is
// sent.
type Limited interface {
	MaxRequestBytes() int
}

// ErrTooLarge matches every *TooLargeError (errors.Is).
var ErrTooLarge = errors.New("request exceeds the target's size limit")

// TooLargeError is a delivery refused for its size.
type TooLargeError struct {
	Size, Limit int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the request is %d bytes, over the target's limit of %d", e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// ErrUnavailable matches every *UnavailableError (errors.Is).
var ErrUnavailable = errors.New("target unavailable")

// UnavailableError is a refusal no retry cures until an operator acts: the
// function does not exist, or the credentials may not invoke it.
type UnavailableError struct {
	// Code is the AWS error code, e.g. ResourceNotFoundException.
	Code    string
	Message string
}

func (e *UnavailableError) Error() string { return e.Code + ": " + e.Message }

// Is makes errors.Is(err, ErrUnavailable) hold.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Func adapts a function to Target (tests, decorators).
type Func func(ctx context.Context, d *Delivery) (*Response, error)

// Deliver calls f.
func (f Func) Deliver(ctx context.Context, d *Delivery) (*Response, error) { return f(ctx, d) }

// HTTPS posts deliveries to a URL with an egress client.
type HTTPS struct {
	client    *http.Client
	url       string
	userAgent string
	maxBody   int64
}

// NewHTTPS returns a Target POSTing to url through client (an egress
// client), reading at most maxBody bytes of each answer.
func NewHTTPS(client *http.Client, url, userAgent string, maxBody int64) *HTTPS {
	return &HTTPS{client: client, url: url, userAgent: userAgent, maxBody: maxBody}
}

// URL returns the target URL.
func (h *HTTPS) URL() string { return h.url }

// Deliver POSTs the envelope with the Standard Webhooks headers.
func (h *HTTPS) Deliver(ctx context.Context, d *Delivery) (*Response, error) {
	req, err := h.request(ctx, d)
	if err != nil {
		return nil, err
	}
	resp, _, err := h.send(req)
	return resp, err
}

// request builds the POST of d with the Standard Webhooks headers.
func (h *HTTPS) request(ctx context.Context, d *Delivery) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(d.Body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	// Canonical keys assigned directly: no per-request canonicalisation.
	req.Header = http.Header{
		"Content-Type":      {"application/json"},
		"User-Agent":        {h.userAgent},
		"Webhook-Id":        {d.MsgID},
		"Webhook-Timestamp": {strconv.FormatInt(d.Timestamp.Unix(), 10)},
		"Webhook-Signature": {d.Signature},
	}
	if d.TraceParent != "" { // a health probe has none
		req.Header["Traceparent"] = []string{d.TraceParent}
	}
	return req, nil
}

// send sends req and reads the answer, capped, returning its headers too.
func (h *HTTPS) send(req *http.Request) (*Response, http.Header, error) {
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, nil, err // *url.Error: names the URL, carries the cause
	}
	defer resp.Body.Close()
	out := &Response{
		Status:     resp.StatusCode,
		RetryAfter: RetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		Location:   resp.Header.Get("Location"),
	}
	out.Body, out.Truncated, err = readCapped(resp.Body, resp.ContentLength, h.maxBody)
	if err != nil {
		return nil, nil, fmt.Errorf("read response: %w", err)
	}
	return out, resp.Header, nil
}

// readCapped reads at most limit bytes, reporting whether more followed. It
// drains nothing beyond the cap: the connection is dropped rather than
// spending time on an oversized body.
func readCapped(r io.Reader, contentLength, limit int64) ([]byte, bool, error) {
	size := 512
	if contentLength >= 0 && contentLength <= limit {
		size = int(contentLength) + 1 // +1 so ReadFrom sees EOF without growing
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	if n > limit {
		return buf.Bytes()[:limit], true, nil
	}
	return buf.Bytes(), false, nil
}

// RetryAfter parses a Retry-After value: delay-seconds or an HTTP date
// (relative to now). Absent, malformed or past values give 0.
func RetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
