// Package lambda hosts webhooksdk providers on AWS Lambda: a [Handler] for
// aws-lambda-go's lambda.Start that serves the same providers, with the same options,
// as the HTTP [webhooksdk.Handler].
//
//	h, err := lambda.New(providers, webhooksdk.WithSecrets(secret))
//	if err != nil { ... }
//	awslambda.Start(h.Serve) // awslambda is github.com/aws/aws-lambda-go/lambda
//
// It takes two events, both shaped like a Function URL (API Gateway v2 HTTP) request:
//
//   - the dispatcher's direct Invoke event, {"version": "converge.v1", "rawPath": "/",
//     "headers": {...}, "body": "<envelope JSON>", "isBase64Encoded": false};
//   - a Function URL request (events.LambdaFunctionURLRequest), the body possibly
//     base64-encoded.
//
// Each is turned into the HTTP request the dispatcher would have sent and served by the
// webhooksdk Endpoint itself (signature, health probe, deduplication, readiness), and
// the answer comes back as an HTTP response object (events.LambdaFunctionURLResponse):
// statusCode, headers and body, exactly as the HTTP handler would have answered.
//
// A Lambda execution environment freezes once the handler returns, so nothing may be
// left running then (see [webhooksdk.Endpoint.ServeInvocation]):
//
//   - A request carrying the header "x-converge-invocation: event" (the dispatcher adds
//     it to Event invokes, whose answer nobody reads) runs Work and POSTs the Result to
//     the envelope's callback, heartbeating meanwhile, before returning 202. A refusal
//     (401, 404, 503, ...) is returned as a function error instead, so that it shows in
//     the function's error metrics and Lambda retries the event.
//   - Any other request (a RequestResponse invoke, a Function URL request) is answered
//     inline: 200 with the Result once Work finishes, however long after the sync
//     budget, since a 202 would leave the work frozen.
package lambda

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	"github.com/convergeplane/converge/webhooksdk/internal/capture"

	"github.com/aws/aws-lambda-go/events"

	"github.com/convergeplane/converge/webhooksdk"
)

// HeaderInvocation is the event header that selects the invocation mode; its value
// [InvocationEvent] marks an Event invoke.
const HeaderInvocation = "x-converge-invocation"

// InvocationEvent is [HeaderInvocation]'s value on an Event invoke.
const InvocationEvent = "event"

// Handler serves webhooksdk providers from Lambda events. Pass its Serve method to
// aws-lambda-go's lambda.Start.
type Handler struct {
	ep *webhooksdk.Endpoint
}

// New returns a Handler serving providers with opts, as [webhooksdk.Handler] does.
func New(providers []webhooksdk.Provider, opts ...webhooksdk.Option) (*Handler, error) {
	ep, err := webhooksdk.Handler(providers, opts...)
	if err != nil {
		return nil, fmt.Errorf("webhooksdk lambda: %w", err)
	}
	return &Handler{ep: ep}, nil
}

// Serve serves one event: the dispatcher's converge.v1 Invoke event or a Function URL
// request (the first is a subset of the second's shape). Its context is the
// invocation's, carrying the Lambda deadline.
func (h *Handler) Serve(ctx context.Context, ev events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
	req, err := request(ctx, &ev)
	if err != nil {
		return events.LambdaFunctionURLResponse{}, fmt.Errorf("webhooksdk lambda: %w", err)
	}
	inv := webhooksdk.InvocationSync
	event := strings.EqualFold(req.Header.Get(HeaderInvocation), InvocationEvent)
	if event {
		inv = webhooksdk.InvocationEvent
	}
	w := capture.New()
	h.ep.ServeInvocation(w, req, inv)
	switch {
	case w.Status == 0:
		return events.LambdaFunctionURLResponse{}, fmt.Errorf("webhooksdk lambda: no answer before the invocation ended: %w", context.Cause(ctx))
	case event && w.Status >= http.StatusMultipleChoices:
		return events.LambdaFunctionURLResponse{}, fmt.Errorf("webhooksdk lambda: event refused with %d: %s", w.Status, w.Body.Bytes())
	}
	return response(w), nil
}

// request builds the HTTP request the event stands for. An event without a method (the
// converge.v1 Invoke event) is a POST.
func request(ctx context.Context, ev *events.LambdaFunctionURLRequest) (*http.Request, error) {
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
			return nil, fmt.Errorf("decode base64 body: %w", err)
		}
	}
	method := ev.RequestContext.HTTP.Method
	if method == "" {
		method = http.MethodPost
	}
	path := ev.RawPath
	if path == "" {
		path = "/"
	}
	req, err := http.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	for k, v := range ev.Headers {
		req.Header.Set(k, v)
	}
	return req, nil
}

// response converts the recorded answer. Every body the Endpoint writes is JSON text,
// so none needs base64.
func response(r *capture.Recorder) events.LambdaFunctionURLResponse {
	headers := make(map[string]string, len(r.Header()))
	for k, vs := range r.Header() {
		headers[k] = strings.Join(vs, ", ")
	}
	return events.LambdaFunctionURLResponse{StatusCode: r.Status, Headers: headers, Body: r.Body.String()}
}
