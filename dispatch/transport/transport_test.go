package transport_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/transport"
	"github.com/convergeplane/converge/webhooksdk"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := map[string]time.Duration{
		"":                              0,
		"1":                             time.Second,
		"120":                           2 * time.Minute,
		"0":                             0,
		"-5":                            0,
		"soon":                          0,
		"Thu, 01 Jan 2026 00:00:30 GMT": 30 * time.Second,
		"Wed, 31 Dec 2025 23:00:00 GMT": 0, // in the past
		"99999999999":                   24 * time.Hour,
	}
	for in, want := range tests {
		if got := transport.RetryAfter(in, now); got != want {
			t.Errorf("RetryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestHTTPSDeliver(t *testing.T) {
	t.Parallel()
	secret, _ := webhooksdk.GenerateSecret()
	sec, _ := webhooksdk.ParseSecret(secret)
	var gotUA string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhooksdk.Verify([]webhooksdk.Secret{sec}, r.Header, body, time.Now(), 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		gotUA = r.Header.Get("User-Agent")
		switch string(body) {
		case "big":
			_, _ = io.WriteString(w, strings.Repeat("x", 100))
		case "redirect":
			w.Header().Set("Location", "https://elsewhere/")
			w.WriteHeader(http.StatusFound)
		default:
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "later")
		}
	}))
	t.Cleanup(srv.Close)
	client, err := egress.NewClient(egress.ClientConfig{Policy: egress.Policy{DevMode: true}})
	if err != nil {
		t.Fatal(err)
	}
	tgt := transport.NewHTTPS(client, srv.URL, "ua/1", 10)
	signer, _ := webhooksdk.NewSigner(secret)
	send := func(body string) *transport.Response {
		t.Helper()
		now := time.Now()
		resp, err := tgt.Deliver(context.Background(), &transport.Delivery{MsgID: "msg_1", Timestamp: now, Body: []byte(body),
			Signature: signer.Sign("msg_1", now, []byte(body))})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := send("x"); r.Status != 503 || r.RetryAfter != 3*time.Second || string(r.Body) != "later" || r.Truncated {
		t.Errorf("503 = %+v", r)
	}
	if gotUA != "ua/1" {
		t.Errorf("user-agent %q", gotUA)
	}
	if r := send("big"); !r.Truncated || len(r.Body) != 10 {
		t.Errorf("oversized body: %d bytes, truncated %v; want the 10-byte cap", len(r.Body), r.Truncated)
	}
	if r := send("redirect"); r.Status != http.StatusFound || r.Location != "https://elsewhere/" {
		t.Errorf("redirect = %+v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tgt.Deliver(ctx, &transport.Delivery{MsgID: "m", Timestamp: time.Now(), Body: []byte("x")}); err == nil {
		t.Error("a cancelled context delivered")
	}
}

// TestEventTraceparent: a Lambda event carries the attempt's traceparent
// among its headers, and none when the delivery has none (a health probe).
func TestEventTraceparent(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct{ traceparent, want string }{{tp, `"traceparent":"` + tp + `"`}, {"", ""}} {
		b, err := transport.EncodeEvent(&transport.Delivery{MsgID: "msg_1", Timestamp: time.Unix(1767225600, 0), Body: []byte(`{}`),
			Signature: "v1,x", TraceParent: tc.traceparent}, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), "traceparent"); got != (tc.want != "") || !strings.Contains(string(b), tc.want) {
			t.Errorf("traceparent %q: event %s", tc.traceparent, b)
		}
	}
}
