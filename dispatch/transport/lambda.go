package transport

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Lambda payload limits (the Invoke API's quotas).
const (
	MaxSyncRequestBytes  = 6 << 20 // RequestResponse
	MaxAsyncRequestBytes = 1 << 20 // Event
)

// EventVersion tags the Invoke payload: a Function URL event, so one
// adapter serves both the Invoke API and a Function URL.
const EventVersion = "converge.v1"

// TerminalErrorType is the errorType of a function error that fails the
// task terminally; any other function error is transient.
const TerminalErrorType = "Terminal"

// Event is the Invoke payload: the signed delivery shaped like a Function
// URL event.
type Event struct {
	Version         string       `json:"version"`
	RawPath         string       `json:"rawPath"`
	Headers         EventHeaders `json:"headers"`
	Body            string       `json:"body"`
	IsBase64Encoded bool         `json:"isBase64Encoded"`
}

// EventHeaders are the Standard Webhooks headers of an Event.
type EventHeaders struct {
	ContentType      string `json:"content-type"`
	WebhookID        string `json:"webhook-id"`
	WebhookTimestamp string `json:"webhook-timestamp"`
	WebhookSignature string `json:"webhook-signature"`
	// TraceParent is the delivery attempt's W3C traceparent.
	TraceParent string `json:"traceparent,omitempty"`
	// Invocation is "event" on an Event invocation, whose answer nobody
	// reads: the function must post its Result to the callback before it
	// returns (webhooksdk/lambda). Absent on a sync invocation.
	Invocation string `json:"x-converge-invocation,omitempty"`
}

// EventResponse is a sync function's answer, shaped like a Function URL
// response: the status and body classified as an HTTPS answer's.
type EventResponse struct {
	StatusCode      *int              `json:"statusCode"`
	Headers         map[string]string `json:"headers"`
	Body            string            `json:"body"`
	IsBase64Encoded bool              `json:"isBase64Encoded"`
}

// FunctionError is a function's failure (X-Amz-Function-Error) and its
// error payload's fields.
type FunctionError struct {
	// Kind is Handled (the function returned an error) or Unhandled (the
	// runtime failed: a crash, a timeout, out of memory).
	Kind    string
	Type    string
	Message string
}

// Terminal reports whether the error fails the task terminally: its
// errorType is TerminalErrorType.
func (e *FunctionError) Terminal() bool { return e.Type == TerminalErrorType }

// Lambda invokes a function through the Invoke API: a SigV4-signed POST
// of the event to /2015-03-31/functions/{function}/invocations, made here
// with the SDK's signer and credentials over the egress client rather than
// through service/lambda's client: that client's middleware stack
// (serialization, endpoint rules, auth scheme, retry wrappers) cost the
// dispatcher more CPU per Invoke than a whole HTTPS delivery, most of the
// gap between the two paths.
type Lambda struct {
	client    *http.Client
	url       string // the function's invocations URL, qualifier included
	userAgent string
	creds     aws.CredentialsProvider
	region    string
	signer    *v4.Signer
	async     bool
	maxBody   int64
}

// LambdaConfig says which function a Lambda target invokes, and how.
type LambdaConfig struct {
	// Function is a name or an ARN; Qualifier a version or alias, or "".
	Function, Qualifier string
	// Region signs the requests; Endpoint replaces the region's Invoke API
	// endpoint (https://lambda.<region>.amazonaws.com) when set.
	Region, Endpoint string
	// Async invokes with Event rather than RequestResponse.
	Async bool
}

// NewLambda returns a Target invoking c's function through client (an
// egress client, which must not retry: the dispatcher owns retry), signed
// with creds. maxBody caps the answer's body the dispatcher keeps.
func NewLambda(client *http.Client, c LambdaConfig, userAgent string, creds aws.CredentialsProvider, maxBody int64) *Lambda {
	base := c.Endpoint
	if base == "" {
		base = "https://lambda." + c.Region + ".amazonaws.com"
	}
	u := strings.TrimSuffix(base, "/") + "/2015-03-31/functions/" + url.PathEscape(c.Function) + "/invocations"
	if c.Qualifier != "" {
		u += "?Qualifier=" + url.QueryEscape(c.Qualifier)
	}
	return &Lambda{client: client, url: u, userAgent: userAgent, creds: creds, region: c.Region, signer: v4.NewSigner(),
		async: c.Async, maxBody: maxBody}
}

// payloadLimit is the Invoke payload limit of the invocation type.
func (l *Lambda) payloadLimit() int {
	if l.async {
		return MaxAsyncRequestBytes
	}
	return MaxSyncRequestBytes
}

// eventFrame bounds what the event adds around the envelope: its fields,
// the headers and the signature.
const eventFrame = 4 << 10

// MaxRequestBytes is the largest envelope sure to fit the Invoke payload:
// the event carries the envelope as a JSON string, whose escaping can double
// it (every '"' and '\' takes two bytes), so half the payload limit less
// the event's frame. A larger envelope is sent thin (payload_url).
func (l *Lambda) MaxRequestBytes() int { return (l.payloadLimit() - eventFrame) / 2 }

// EncodeEvent returns d as an Invoke payload; event marks an Event
// invocation.
func EncodeEvent(d *Delivery, event bool) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, len(d.Body)+len(d.Body)/4+256))
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	h := EventHeaders{ContentType: "application/json", WebhookID: d.MsgID,
		WebhookTimestamp: strconv.FormatInt(d.Timestamp.Unix(), 10), WebhookSignature: d.Signature, TraceParent: d.TraceParent}
	if event {
		h.Invocation = "event"
	}
	err := enc.Encode(Event{Version: EventVersion, RawPath: "/", Body: string(d.Body), Headers: h})
	if err != nil {
		return nil, fmt.Errorf("encode invoke event: %w", err)
	}
	return buf.Bytes(), nil
}

// Deliver invokes the function with d as an Event and maps the answer onto
// an HTTPS-like Response.
func (l *Lambda) Deliver(ctx context.Context, d *Delivery) (*Response, error) {
	payload, err := EncodeEvent(d, l.async)
	if err != nil {
		return nil, err
	}
	if limit := l.payloadLimit(); len(payload) > limit {
		return nil, &TooLargeError{Size: len(payload), Limit: limit}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("build invoke request: %w", err)
	}
	invocation := "RequestResponse"
	if l.async {
		invocation = "Event"
	}
	req.Header = http.Header{
		"Content-Type":          {"application/json"},
		"User-Agent":            {l.userAgent},
		"X-Amz-Invocation-Type": {invocation},
	}
	creds, err := l.creds.Retrieve(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	sum := sha256.Sum256(payload)
	if err := l.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "lambda", l.region, time.Now()); err != nil {
		return nil, fmt.Errorf("sign invoke request: %w", err)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, err // *url.Error: names the URL, carries the cause
	}
	defer resp.Body.Close()
	// The whole payload, up to a sync answer's limit: it is decoded before
	// the body the dispatcher keeps is capped.
	body, _, err := readCapped(resp.Body, resp.ContentLength, MaxSyncRequestBytes)
	if err != nil {
		return nil, fmt.Errorf("read invoke response: %w", err)
	}
	switch fe := resp.Header.Get("X-Amz-Function-Error"); {
	case resp.StatusCode >= http.StatusMultipleChoices:
		return invokeError(resp, body)
	case fe != "":
		return functionError(fe, body), nil
	case l.async:
		return &Response{Status: resp.StatusCode}, nil
	}
	return l.decodeAnswer(body), nil
}

// decodeAnswer reads a sync function's EventResponse. A payload without
// statusCode is taken as the body of a 200, so a function may return a
// Result as is.
func (l *Lambda) decodeAnswer(payload []byte) *Response {
	var er EventResponse
	if err := json.Unmarshal(payload, &er); err != nil || er.StatusCode == nil {
		return l.capped(&Response{Status: http.StatusOK}, payload)
	}
	resp := &Response{Status: *er.StatusCode}
	for k, v := range er.Headers {
		switch {
		case strings.EqualFold(k, "Retry-After"):
			resp.RetryAfter = RetryAfter(v, time.Now())
		case strings.EqualFold(k, "Location"):
			resp.Location = v
		}
	}
	body := []byte(er.Body)
	if er.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(er.Body)
		if err != nil {
			return l.capped(&Response{Status: http.StatusOK}, payload) // unusable: the classifier says so
		}
		body = b
	}
	return l.capped(resp, body)
}

func (l *Lambda) capped(r *Response, body []byte) *Response {
	if int64(len(body)) > l.maxBody {
		body, r.Truncated = body[:l.maxBody], true
	}
	r.Body = body
	return r
}

// functionError maps X-Amz-Function-Error and its payload
// ({"errorMessage", "errorType"}) to a 502-like Response, so a reader that
// does not look at FunctionError still sees a failure.
func functionError(kind string, payload []byte) *Response {
	var p struct {
		Message string `json:"errorMessage"`
		Type    string `json:"errorType"`
	}
	fe := &FunctionError{Kind: kind}
	if json.Unmarshal(payload, &p) == nil {
		fe.Type, fe.Message = p.Type, p.Message
	}
	if fe.Message == "" {
		fe.Message = strings.TrimSpace(string(payload[:min(len(payload), 512)]))
	}
	return &Response{Status: http.StatusBadGateway, FunctionError: fe, Body: payload}
}

// invokeError maps an Invoke API error answer (its type in
// X-Amzn-ErrorType, "Code:namespace", and a JSON body with a message). A
// throttle is a 429 (not executed); a missing function or a permission
// error an *UnavailableError; another its HTTP status.
func invokeError(resp *http.Response, body []byte) (*Response, error) {
	code, _, _ := strings.Cut(resp.Header.Get("X-Amzn-Errortype"), ":")
	var e struct {
		Message  string `json:"message"`
		Message2 string `json:"Message"`
	}
	_ = json.Unmarshal(body, &e)
	msg := cmp.Or(e.Message, e.Message2, strings.TrimSpace(string(body[:min(len(body), 512)])))
	if unavailable(code) {
		return nil, &UnavailableError{Code: code, Message: msg}
	}
	r := &Response{Status: resp.StatusCode, Body: []byte(cmp.Or(code, http.StatusText(resp.StatusCode)) + ": " + msg)}
	if resp.StatusCode == http.StatusTooManyRequests {
		r.RetryAfter = RetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return r, nil
}

// unavailable holds for the AWS error codes no retry cures: the function
// is missing, or the credentials may not invoke it.
func unavailable(code string) bool {
	switch code {
	case "ResourceNotFoundException", "AccessDeniedException", "AccessDenied", "UnrecognizedClientException":
		return true
	}
	return false
}

// LambdaURL POSTs deliveries to a Function URL, SigV4-signed when it has
// credentials (auth aws_iam).
type LambdaURL struct {
	https  *HTTPS
	creds  aws.CredentialsProvider // nil: auth none
	region string
	signer *v4.Signer
}

// NewLambdaURL returns a Target POSTing to the Function URL url through
// client (an egress client); with creds, each request is SigV4-signed for
// service lambda in region.
func NewLambdaURL(client *http.Client, url, userAgent string, maxBody int64, creds aws.CredentialsProvider, region string) *LambdaURL {
	return &LambdaURL{https: NewHTTPS(client, url, userAgent, maxBody), creds: creds, region: region, signer: v4.NewSigner()}
}

// MaxRequestBytes is the Function URL's request limit (a sync invoke's).
func (l *LambdaURL) MaxRequestBytes() int { return MaxSyncRequestBytes }

// Deliver POSTs the envelope with the Standard Webhooks headers, signed.
func (l *LambdaURL) Deliver(ctx context.Context, d *Delivery) (*Response, error) {
	if len(d.Body) > MaxSyncRequestBytes {
		return nil, &TooLargeError{Size: len(d.Body), Limit: MaxSyncRequestBytes}
	}
	req, err := l.https.request(ctx, d)
	if err != nil {
		return nil, err
	}
	if l.creds != nil {
		creds, err := l.creds.Retrieve(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCredentials, err)
		}
		sum := sha256.Sum256(d.Body)
		if err := l.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "lambda", l.region, time.Now()); err != nil {
			return nil, fmt.Errorf("sign request: %w", err)
		}
	}
	resp, h, err := l.https.send(req)
	if err != nil {
		return nil, err
	}
	// AWS's own refusal (it names its error type), not the function's 403.
	if code := h.Get("X-Amzn-Errortype"); resp.Status == http.StatusForbidden && code != "" {
		code, _, _ = strings.Cut(code, ":")
		return nil, &UnavailableError{Code: code, Message: "the Function URL refused the request: " + strings.TrimSpace(string(resp.Body))}
	}
	return resp, nil
}
