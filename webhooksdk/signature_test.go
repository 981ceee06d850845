package webhooksdk_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// The Standard Webhooks specification's published test vector.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// A second valid secret (27 bytes), for rotation and wrong-secret cases.
const otherSecret = "whsec_c2Vjb25kLXNlY3JldC0yNC1ieXRlcy1sb25n"

func mustSecret(t testing.TB, s string) webhooksdk.Secret {
	t.Helper()
	sec, err := webhooksdk.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret(%q): %v", s, err)
	}
	return sec
}

func TestSignSpecVector(t *testing.T) {
	t.Parallel()
	got := webhooksdk.Sign(mustSecret(t, vectorSecret), vectorMsgID, time.Unix(vectorTimestamp, 0), []byte(vectorBody))
	if got != vectorSignature {
		t.Fatalf("Sign = %q, want the specification's %q", got, vectorSignature)
	}
	// The pooled HMAC state must not leak between calls.
	for range 3 {
		if again := webhooksdk.Sign(mustSecret(t, vectorSecret), vectorMsgID, time.Unix(vectorTimestamp, 0), []byte(vectorBody)); again != got {
			t.Fatalf("second Sign = %q, want %q", again, got)
		}
	}
}

func TestSignLongMessageID(t *testing.T) {
	t.Parallel()
	sec := mustSecret(t, vectorSecret)
	id := "msg_" + strings.Repeat("x", 400) // longer than the scratch buffer
	ts := time.Now()
	body := []byte(`{}`)
	h := http.Header{}
	h.Set(webhooksdk.HeaderID, id)
	h.Set(webhooksdk.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(webhooksdk.HeaderSignature, webhooksdk.Sign(sec, id, ts, body))
	if err := webhooksdk.Verify([]webhooksdk.Secret{sec}, h, body, ts, 0); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func TestSignerRotation(t *testing.T) {
	t.Parallel()
	signer, err := webhooksdk.NewSigner(vectorSecret, otherSecret)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(vectorTimestamp, 0)
	got := signer.Sign(vectorMsgID, ts, []byte(vectorBody))
	parts := strings.Split(got, " ")
	if len(parts) != 2 {
		t.Fatalf("rotation header %q: want 2 space-separated signatures", got)
	}
	if parts[0] != vectorSignature {
		t.Errorf("first signature = %q, want %q", parts[0], vectorSignature)
	}
	if want := webhooksdk.Sign(mustSecret(t, otherSecret), vectorMsgID, ts, []byte(vectorBody)); parts[1] != want {
		t.Errorf("second signature = %q, want %q", parts[1], want)
	}

	// A receiver holding only one of the two secrets accepts the rotated header.
	h := http.Header{}
	signer.SetHeaders(h, vectorMsgID, ts, []byte(vectorBody))
	for _, s := range []string{vectorSecret, otherSecret} {
		if err := webhooksdk.Verify([]webhooksdk.Secret{mustSecret(t, s)}, h, []byte(vectorBody), ts, 0); err != nil {
			t.Errorf("Verify with one rotated secret: %v", err)
		}
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(vectorTimestamp, 0)
	vector := func() http.Header {
		h := http.Header{}
		h.Set(webhooksdk.HeaderID, vectorMsgID)
		h.Set(webhooksdk.HeaderTimestamp, strconv.Itoa(vectorTimestamp))
		h.Set(webhooksdk.HeaderSignature, vectorSignature)
		return h
	}
	tests := []struct {
		name      string
		reason    string
		headers   func() http.Header
		body      string
		now       time.Time
		secrets   []string
		tolerance time.Duration
		want      error // nil: accepted
	}{
		{name: "vector", reason: "the specification's vector verifies", headers: vector},
		{
			name: "several entries one matches", reason: "any v1 entry may match",
			headers: func() http.Header {
				h := vector()
				h.Set(webhooksdk.HeaderSignature, "v1,Zm9vYmFy v2,whatever "+vectorSignature)
				return h
			},
		},
		{
			name: "other secret listed too", reason: "any configured secret may match",
			headers: vector, secrets: []string{otherSecret, vectorSecret},
		},
		{name: "tampered body", reason: "the body is signed", headers: vector, body: `{"test": 2432232315}`, want: webhooksdk.ErrNoMatchingSignature},
		{name: "wrong secret", reason: "another key", headers: vector, secrets: []string{otherSecret}, want: webhooksdk.ErrNoMatchingSignature},
		{
			name: "tampered id", reason: "the id is signed",
			headers: func() http.Header { h := vector(); h.Set(webhooksdk.HeaderID, "msg_other"); return h },
			want:    webhooksdk.ErrNoMatchingSignature,
		},
		{
			name: "non-v1 only", reason: "unknown versions are ignored",
			headers: func() http.Header {
				h := vector()
				h.Set(webhooksdk.HeaderSignature, "v1a,"+strings.TrimPrefix(vectorSignature, "v1,"))
				return h
			},
			want: webhooksdk.ErrNoMatchingSignature,
		},
		{
			name: "truncated signature", reason: "a prefix of the signature is not the signature",
			headers: func() http.Header { h := vector(); h.Set(webhooksdk.HeaderSignature, vectorSignature[:20]); return h },
			want:    webhooksdk.ErrNoMatchingSignature,
		},
		{name: "missing id", headers: func() http.Header { h := vector(); h.Del(webhooksdk.HeaderID); return h }, want: webhooksdk.ErrMissingHeaders},
		{name: "missing timestamp", headers: func() http.Header { h := vector(); h.Del(webhooksdk.HeaderTimestamp); return h }, want: webhooksdk.ErrMissingHeaders},
		{name: "missing signature", headers: func() http.Header { h := vector(); h.Del(webhooksdk.HeaderSignature); return h }, want: webhooksdk.ErrMissingHeaders},
		{
			name: "timestamp not a number",
			headers: func() http.Header {
				h := vector()
				h.Set(webhooksdk.HeaderTimestamp, "2021-02-26T15:42:10Z")
				return h
			},
			want: webhooksdk.ErrInvalidTimestamp,
		},
		{
			name: "timestamp with a sign", reason: "verified over the text received, not the number re-formatted (protocol §3.2)",
			headers: func() http.Header {
				h := vector()
				h.Set(webhooksdk.HeaderTimestamp, "+"+strconv.Itoa(vectorTimestamp))
				return h
			},
			want: webhooksdk.ErrInvalidTimestamp,
		},
		{
			name: "timestamp with a leading zero", reason: "verified over the text received, not the number re-formatted (protocol §3.2)",
			headers: func() http.Header {
				h := vector()
				h.Set(webhooksdk.HeaderTimestamp, "0"+strconv.Itoa(vectorTimestamp))
				return h
			},
			want: webhooksdk.ErrInvalidTimestamp,
		},
		{name: "too old", reason: "replay protection", headers: vector, now: now.Add(5*time.Minute + time.Second), want: webhooksdk.ErrTimestampOutOfTolerance},
		{name: "too new", reason: "clock skew beyond tolerance", headers: vector, now: now.Add(-5*time.Minute - time.Second), want: webhooksdk.ErrTimestampOutOfTolerance},
		{name: "edge of tolerance", reason: "±tolerance is inclusive", headers: vector, now: now.Add(5 * time.Minute)},
		{name: "custom tolerance", headers: vector, now: now.Add(2 * time.Second), tolerance: time.Second, want: webhooksdk.ErrTimestampOutOfTolerance},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{vectorSecret}
			}
			var parsed []webhooksdk.Secret
			for _, s := range secrets {
				parsed = append(parsed, mustSecret(t, s))
			}
			body := tt.body
			if body == "" {
				body = vectorBody
			}
			at := tt.now
			if at.IsZero() {
				at = now
			}
			err := webhooksdk.Verify(parsed, tt.headers(), []byte(body), at, tt.tolerance)
			if tt.want == nil && err != nil {
				t.Fatalf("Verify = %v, want nil (%s)", err, tt.reason)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v (%s)", err, tt.want, tt.reason)
			}
		})
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{name: "vector", in: vectorSecret},
		{name: "64 bytes", in: "whsec_" + b64(64)},
		{name: "no prefix", in: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", wantErr: "prefix"},
		{name: "bad base64", in: "whsec_not*base64", wantErr: "base64"},
		{name: "too short", in: "whsec_" + b64(16), wantErr: "16 bytes"},
		{name: "too long", in: "whsec_" + b64(65), wantErr: "65 bytes"},
		{name: "empty", in: "whsec_", wantErr: "0 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhooksdk.ParseSecret(tt.in)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseSecret: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseSecret error = %v, want it to mention %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), strings.TrimPrefix(tt.in, "whsec_")) && len(tt.in) > len("whsec_") {
				t.Fatalf("error %q leaks the secret", err)
			}
		})
	}
}

func b64(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }

func TestSecretRedacted(t *testing.T) {
	t.Parallel()
	sec := mustSecret(t, vectorSecret)
	for _, s := range []string{fmt.Sprint(sec), fmt.Sprintf("%v %+v %#v %s", sec, sec, sec, sec)} {
		if strings.Contains(s, "MfKQ9r8G") {
			t.Fatalf("formatted secret leaks the key: %q", s)
		}
	}
}

func TestGenerateSecret(t *testing.T) {
	t.Parallel()
	a, err := webhooksdk.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, err := webhooksdk.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("two generated secrets are equal")
	}
	if _, err := webhooksdk.ParseSecret(a); err != nil {
		t.Fatalf("generated secret does not parse: %v", err)
	}
}

// BenchmarkSign signs a 2 KB body with one secret: the SDK (parsed key, pooled HMAC
// state) against a naive baseline that decodes the secret and keys a new HMAC per call.
func BenchmarkSign(b *testing.B) {
	body := []byte(strings.Repeat("x", 2048))
	ts := time.Unix(vectorTimestamp, 0)
	b.Run("sdk", func(b *testing.B) {
		sec := mustSecret(b, vectorSecret)
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		var sig string
		for b.Loop() {
			sig = webhooksdk.Sign(sec, vectorMsgID, ts, body)
		}
		if sig != webhooksdk.Sign(sec, vectorMsgID, ts, body) || !strings.HasPrefix(sig, "v1,") {
			b.Fatal(sig)
		}
	})
	b.Run("naive", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		var sig string
		for b.Loop() {
			key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(vectorSecret, "whsec_"))
			if err != nil {
				b.Fatal(err)
			}
			m := hmac.New(sha256.New, key)
			m.Write([]byte(vectorMsgID + "." + strconv.FormatInt(ts.Unix(), 10) + "." + string(body)))
			sig = "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
		}
		if sig != webhooksdk.Sign(mustSecret(b, vectorSecret), vectorMsgID, ts, body) {
			b.Fatal("naive baseline disagrees with Sign")
		}
	})
}

// BenchmarkVerify verifies a 2 KB body against one secret.
func BenchmarkVerify(b *testing.B) {
	sec := mustSecret(b, vectorSecret)
	secrets := []webhooksdk.Secret{sec}
	body := []byte(strings.Repeat("x", 2048))
	ts := time.Unix(vectorTimestamp, 0)
	h := http.Header{}
	h.Set(webhooksdk.HeaderID, vectorMsgID)
	h.Set(webhooksdk.HeaderTimestamp, strconv.Itoa(vectorTimestamp))
	h.Set(webhooksdk.HeaderSignature, webhooksdk.Sign(sec, vectorMsgID, ts, body))
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := webhooksdk.Verify(secrets, h, body, ts, 0); err != nil {
			b.Fatal(err)
		}
	}
}
