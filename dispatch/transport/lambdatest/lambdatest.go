// Package lambdatest is a stand-in for the AWS Lambda Invoke API, for tests
// and benchmarks: POST /2015-03-31/functions/{name}/invocations as the API
// reference describes it (X-Amz-Invocation-Type, 202 for Event,
// X-Amz-Function-Error, 429 TooManyRequestsException, 404
// ResourceNotFoundException), with every request's SigV4 signature
// recomputed with aws-sdk-go-v2's signer and compared. Behind it, each
// function is a Lambda handler, normally webhooksdk/lambda's, run the way
// the Lambda service runs it: a RequestResponse invoke returns its answer,
// an Event invoke runs it after the 202 (its answer discarded).
package lambdatest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/convergeplane/converge/dispatch/transport"
)

// Static test credentials: never the machine's.
const (
	AccessKeyID     = "AKIDLAMBDATEST"
	SecretAccessKey = "lambdatest-secret-access-key"
	Region          = "eu-west-1"
)

// Server is the Invoke API stand-in.
type Server struct {
	*httptest.Server
	creds aws.Credentials
	wg    sync.WaitGroup

	// Calls counts requests; Invalid those whose SigV4 signature did not
	// verify (answered 403).
	Calls, Invalid atomic.Int64

	mu        sync.Mutex
	functions map[string]*Function
}

// Handler is a Lambda function's handler for Function URL shaped events
// (the converge.v1 event is one): webhooksdk/lambda's Handler.Serve.
type Handler func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error)

// Function is one function: its handler and the faults it injects.
type Function struct {
	handler Handler
	// Throttle answers the next n invocations 429 TooManyRequestsException
	// without running them.
	Throttle atomic.Int32
	// Invocations counts those that ran (sync or Event), Events the Event
	// ones, Throttled those refused.
	Invocations, Events, Throttled atomic.Int32

	mu   sync.Mutex
	fail func() *transport.FunctionError
}

// FailWith makes each invocation ask f first: a non-nil answer is returned
// as a function error (X-Amz-Function-Error) instead of running.
func (f *Function) FailWith(fn func() *transport.FunctionError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fn
}

func (f *Function) failure() *transport.FunctionError {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		return nil
	}
	return f.fail()
}

// New starts a Server; it is closed with the test.
func New(t interface{ Cleanup(func()) }) *Server {
	s := &Server{creds: aws.Credentials{AccessKeyID: AccessKeyID, SecretAccessKey: SecretAccessKey, Source: "lambdatest"},
		functions: map[string]*Function{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serveInvoke))
	t.Cleanup(func() { s.Close(); s.wg.Wait() })
	return s
}

// AWSConfig is the base configuration a dispatcher uses against s: the
// static test credentials.
func AWSConfig(context.Context) (aws.Config, error) {
	return aws.Config{Region: Region, Credentials: credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, "")}, nil
}

// Add registers function name served by h.
func (s *Server) Add(name string, h Handler) *Function {
	f := &Function{handler: h}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.functions[name] = f
	return f
}

// awsError answers an AWS JSON error.
func awsError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-Errortype", code)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"Type": "User", "message": msg})
}

func (s *Server) serveInvoke(w http.ResponseWriter, r *http.Request) {
	s.Calls.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		awsError(w, http.StatusBadRequest, "InvalidRequestContentException", err.Error())
		return
	}
	if err := Verify(r, body, s.creds); err != nil {
		s.Invalid.Add(1)
		awsError(w, http.StatusForbidden, "InvalidSignatureException", err.Error())
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/2015-03-31/functions/")
	name, ok2 := strings.CutSuffix(rest, "/invocations")
	if r.Method != http.MethodPost || !ok || !ok2 {
		awsError(w, http.StatusNotFound, "UnknownOperationException", "unknown operation "+r.Method+" "+r.URL.Path)
		return
	}
	if i := strings.LastIndex(name, ":function:"); i >= 0 { // an ARN
		name, _, _ = strings.Cut(name[i+len(":function:"):], ":")
	}
	s.mu.Lock()
	f := s.functions[name]
	s.mu.Unlock()
	if f == nil {
		awsError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+name)
		return
	}
	if f.Throttle.Add(-1) >= 0 {
		f.Throttled.Add(1)
		awsError(w, http.StatusTooManyRequests, "TooManyRequestsException", "Rate Exceeded.")
		return
	}
	f.Throttle.Store(0)
	var ev events.LambdaFunctionURLRequest
	if err := json.Unmarshal(body, &ev); err != nil || ev.Version != transport.EventVersion {
		awsError(w, http.StatusBadRequest, "InvalidRequestContentException", "not a converge.v1 event")
		return
	}
	f.Invocations.Add(1)
	switch r.Header.Get("X-Amz-Invocation-Type") {
	case "Event":
		f.Events.Add(1)
		w.WriteHeader(http.StatusAccepted)
		// The service runs the function after accepting the event; its
		// answer, and its error, go nowhere.
		s.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = f.handler(ctx, ev)
		})
	case "", "RequestResponse":
		w.Header().Set("X-Amz-Executed-Version", "$LATEST")
		fe := f.failure()
		if fe == nil {
			resp, err := f.handler(r.Context(), ev)
			if err == nil {
				_ = json.NewEncoder(w).Encode(resp)
				return
			}
			fe = &transport.FunctionError{Kind: "Unhandled", Type: "errorString", Message: err.Error()}
		}
		w.Header().Set("X-Amz-Function-Error", fe.Kind)
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(map[string]any{"errorMessage": fe.Message, "errorType": fe.Type})
	default:
		awsError(w, http.StatusBadRequest, "InvalidParameterValueException", "unsupported invocation type")
	}
}

// Verify recomputes r's SigV4 signature (service lambda) over body with
// creds and compares it with the one r carries.
func Verify(r *http.Request, body []byte, creds aws.Credentials) error {
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return errors.New("no SigV4 Authorization header")
	}
	fields := map[string]string{}
	for _, kv := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/") // AKID/date/region/service/aws4_request
	if len(scope) != 5 || scope[0] != creds.AccessKeyID || scope[3] != "lambda" || scope[4] != "aws4_request" {
		return fmt.Errorf("bad credential scope %q", fields["Credential"])
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("bad X-Amz-Date: %w", err)
	}
	if d := time.Since(at); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("X-Amz-Date %s is skewed", at)
	}
	req, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	if err != nil {
		return err
	}
	req.ContentLength = r.ContentLength
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		if h != "host" && h != "content-length" {
			req.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(r.Context(), creds, req, hex.EncodeToString(sum[:]), "lambda", scope[2], at); err != nil {
		return fmt.Errorf("re-sign: %w", err)
	}
	if got := req.Header.Get("Authorization"); got != auth {
		return fmt.Errorf("signature mismatch: got %q, recomputed %q", auth, got)
	}
	return nil
}

// URLHandler serves a Function URL in front of h: with iam, each request's
// SigV4 signature must verify (else 403 InvalidSignatureException, counted
// in invalid); the request then reaches h as is.
func URLHandler(h http.Handler, iam bool, invalid *atomic.Int64) http.Handler {
	creds := aws.Credentials{AccessKeyID: AccessKeyID, SecretAccessKey: SecretAccessKey}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if iam {
			if err := Verify(r, body, creds); err != nil {
				invalid.Add(1)
				awsError(w, http.StatusForbidden, "InvalidSignatureException", err.Error())
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}
