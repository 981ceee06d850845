package cli

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// APIPrefix is the path under which the server serves its REST API.
const APIPrefix = "/api/v1"

// maxResponseBytes caps how much of a response body the client reads.
const maxResponseBytes = 64 << 20

// ClientConfig configures a Client.
type ClientConfig struct {
	// Server is the server's base URL, e.g. http://localhost:8080. A trailing
	// /api/v1 is accepted and ignored. Required; http and https only.
	Server string

	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string

	// Timeout bounds each HTTP request. Zero means no timeout.
	Timeout time.Duration

	// UserAgent is sent with every request. Defaults to "conctl".
	UserAgent string

	// HTTPClient is the transport to use. Defaults to a new http.Client
	// with Timeout.
	HTTPClient *http.Client

	// Namespace, when set and not "default", is sent as the query
	// parameter "namespace" of every request to a path of namespaced
	// objects (see namespacedPath) whose query does not name one itself.
	// The server's own default is "default": a request in it is sent as
	// before namespaces were, and works with a server that has none.
	Namespace string

	// Retries is how many more times a request is sent after it failed in
	// transit, or was answered 429, 502, 503 or 504 (or 409 because its
	// idempotency key is held by its own earlier attempt, still running).
	// Every POST carries an Idempotency-Key that its retries reuse, so a
	// retry never runs it twice. Zero sends each request once.
	Retries int
}

// Retry back-off: the first wait, doubled each retry, and the most a
// Retry-After may make one wait.
const (
	retryFirstWait = 250 * time.Millisecond
	retryMaxWait   = 10 * time.Second
)

// Client speaks the converge REST API. Every subcommand goes through it, so
// authentication, error decoding and connection diagnostics live in one place.
type Client struct {
	server    string // as the user gave it, for messages
	base      string // scheme://host[:port][/prefix]/api/v1, no trailing slash
	token     string
	namespace string
	userAgent string
	timeout   time.Duration
	retries   int
	http      *http.Client
}

// NewClient validates cfg and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	server := strings.TrimSpace(cfg.Server)
	if server == "" {
		return nil, errors.New("server URL is empty")
	}
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("invalid server URL %q: %w", server, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid server URL %q: want http:// or https://", server)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("invalid server URL %q: no host", server)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("invalid server URL %q: must not have a query or fragment", server)
	}
	if u.User != nil {
		return nil, fmt.Errorf("invalid server URL: must not carry credentials; use --token")
	}
	path := strings.TrimRight(u.EscapedPath(), "/")
	path = strings.TrimSuffix(path, APIPrefix)
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: cfg.Timeout}
	}
	return &Client{
		server:    server,
		base:      u.Scheme + "://" + u.Host + path + APIPrefix,
		token:     cfg.Token,
		namespace: cfg.Namespace,
		userAgent: cmp.Or(cfg.UserAgent, "conctl"),
		timeout:   cfg.Timeout,
		retries:   max(cfg.Retries, 0),
		http:      hc,
	}, nil
}

// Server returns the server URL the client talks to, as configured.
func (c *Client) Server() string { return c.server }

// Response is a successful (2xx) API response.
type Response struct {
	StatusCode int
	Header     http.Header
	Body       []byte
}

// ApplyResult reports what an apply did: created, configured or unchanged.
// It reads X-Apply-Result and falls back to the status code.
func (r *Response) ApplyResult() string {
	if v := strings.TrimSpace(r.Header.Get("X-Apply-Result")); v != "" {
		return strings.ToLower(v)
	}
	if r.StatusCode == http.StatusCreated {
		return "created"
	}
	return "configured"
}

// ProblemError is one field error in a problem response.
type ProblemError struct {
	Location string `json:"location,omitempty"`
	Message  string `json:"message,omitempty"`
	Value    any    `json:"value,omitempty"`
}

// APIError is a non-2xx answer from the server, decoded from its RFC 9457
// problem document when it sent one.
type APIError struct {
	Method     string
	URL        string
	StatusCode int
	// Type is the problem type, e.g. urn:converge:problem:version-conflict.
	Type   string
	Title  string
	Detail string
	Errors []ProblemError
	// RetryAfter is the answer's Retry-After, 0 without one.
	RetryAfter time.Duration
}

// Error renders "409 Conflict: <detail>".
func (e *APIError) Error() string {
	s := e.Status()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Status renders the status code and title, e.g. "409 Conflict".
func (e *APIError) Status() string {
	title := e.Title
	if title == "" {
		title = http.StatusText(e.StatusCode)
	}
	if title == "" {
		return fmt.Sprint(e.StatusCode)
	}
	return fmt.Sprintf("%d %s", e.StatusCode, title)
}

// ConnError means the server could not be reached (or did not answer in time).
type ConnError struct {
	Server  string
	Timeout time.Duration
	Err     error
}

func (e *ConnError) Error() string {
	var ue *url.Error
	if errors.As(e.Err, &ue) && ue.Timeout() {
		return fmt.Sprintf("no answer from the converge server at %s within %s (raise --timeout, or check --server / $CONVERGE_SERVER)",
			e.Server, e.Timeout)
	}
	cause := e.Err
	if errors.As(e.Err, &ue) {
		cause = ue.Err
	}
	return fmt.Sprintf("cannot reach the converge server at %s (set --server or $CONVERGE_SERVER): %v", e.Server, cause)
}

func (e *ConnError) Unwrap() error { return e.Err }

// Do sends one request to path (relative to /api/v1, e.g. "/resources") with
// an optional query and JSON body, again up to Retries times while it fails
// in a way a retry may fix (see ClientConfig.Retries). A POST carries an
// Idempotency-Key, the same on every retry. A non-2xx answer is returned as
// *APIError, a transport failure as *ConnError.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body []byte) (*Response, error) {
	query = c.inNamespace(path, query)
	target := c.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var key string
	if method == http.MethodPost {
		key = rand.Text()
	}
	wait := retryFirstWait
	for attempt := 0; ; attempt++ {
		resp, err := c.send(ctx, method, target, body, key)
		again, after := retryable(err)
		if !again || attempt == c.retries || ctx.Err() != nil {
			return resp, err
		}
		if after > 0 {
			wait = min(after, retryMaxWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMaxWait)
	}
}

// inNamespace returns query with the client's namespace added when path
// addresses namespaced objects, query names no namespace and the client's
// is not the server's default; query itself is left as it is.
func (c *Client) inNamespace(path string, query url.Values) url.Values {
	if c.namespace == "" || c.namespace == NamespaceDefault || !namespacedPath(path) || query.Has("namespace") {
		return query
	}
	return withParam(query, "namespace", c.namespace)
}

// withParam is a copy of q with the parameter key set to value.
func withParam(q url.Values, key, value string) url.Values {
	out := make(url.Values, len(q)+1)
	for k, v := range q {
		out[k] = v
	}
	out.Set(key, value)
	return out
}

// retryable says whether a request that failed with err may succeed if
// sent again, and how long the server asked to wait first.
func retryable(err error) (bool, time.Duration) {
	var (
		ce *ConnError
		ae *APIError
	)
	switch {
	case errors.As(err, &ce):
		return true, 0
	case !errors.As(err, &ae):
		return false, 0
	}
	switch ae.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true, ae.RetryAfter
	case http.StatusConflict:
		return ae.Type == problemKeyInUse, ae.RetryAfter
	}
	return false, 0
}

// Problem types conctl acts on.
const (
	// problemKeyInUse answers a request whose idempotency key an earlier
	// attempt of it still holds, running: retried.
	problemKeyInUse = "urn:converge:problem:idempotency-key-in-use"
	// problemVersionConflict and problemPreconditionFailed refuse a write
	// made from a stale version (a resource_version in the body, or
	// If-Match): explained, with --force.
	problemVersionConflict    = "urn:converge:problem:version-conflict"
	problemPreconditionFailed = "urn:converge:problem:precondition-failed"
)

// send sends the request once.
func (c *Client) send(ctx context.Context, method, target string, body []byte, key string) (*Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("cannot build request: %w", err)
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if method == http.MethodGet && ctx.Value(consistentKey{}) != nil {
		req.Header.Set("Consistent-Read", "true")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ConnError{Server: c.server, Timeout: c.timeout, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, &ConnError{Server: c.server, Timeout: c.timeout, Err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, decodeProblem(method, target, resp, data)
	}
	return &Response{StatusCode: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// consistentKey marks a context whose GETs ask for a consistent read.
type consistentKey struct{}

// consistent marks ctx so the GETs sent with it carry Consistent-Read:
// true: a server with a read replica (DATABASE_READ_URL) answers them from
// its primary, so they see the writes this command just made.
func consistent(ctx context.Context) context.Context {
	return context.WithValue(ctx, consistentKey{}, true)
}

func decodeProblem(method, target string, resp *http.Response, data []byte) *APIError {
	e := &APIError{Method: method, URL: target, StatusCode: resp.StatusCode}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if strings.HasSuffix(mt, "json") {
		var p struct {
			Type   string         `json:"type"`
			Title  string         `json:"title"`
			Detail string         `json:"detail"`
			Errors []ProblemError `json:"errors"`
		}
		if json.Unmarshal(data, &p) == nil {
			e.Type, e.Title, e.Detail, e.Errors = p.Type, p.Title, p.Detail, p.Errors
			return e
		}
	}
	// Not a problem document (a proxy's error page, plain text): show the
	// start of the body so the user has something to go on.
	text := strings.Join(strings.Fields(string(data)), " ")
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	e.Detail = text
	return e
}

// Get fetches one object.
func (c *Client) Get(ctx context.Context, path string, query url.Values) (json.RawMessage, error) {
	resp, err := c.Do(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Page is one page of a list answer.
type Page struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"next_cursor,omitempty"`
}

// List fetches one page of path, or with all every page, following
// next_cursor until it is empty. raw is the body of the (last) page as sent.
func (c *Client) List(ctx context.Context, path string, query url.Values, all bool) (page Page, raw json.RawMessage, err error) {
	q := url.Values{}
	for k, v := range query {
		q[k] = append([]string(nil), v...)
	}
	seen := map[string]bool{}
	for {
		resp, err := c.Do(ctx, http.MethodGet, path, q, nil)
		if err != nil {
			return Page{}, nil, err
		}
		var p Page
		if err := json.Unmarshal(resp.Body, &p); err != nil {
			return Page{}, nil, fmt.Errorf("cannot decode list answer from %s: %w", path, err)
		}
		page.Items = append(page.Items, p.Items...)
		page.NextCursor = p.NextCursor
		raw = resp.Body
		if !all || p.NextCursor == "" {
			return page, raw, nil
		}
		if seen[p.NextCursor] {
			return Page{}, nil, fmt.Errorf("server repeated cursor %q while paging %s", p.NextCursor, path)
		}
		seen[p.NextCursor] = true
		q.Set("cursor", p.NextCursor)
	}
}

// seg escapes one path segment.
func seg(s string) string { return url.PathEscape(s) }
