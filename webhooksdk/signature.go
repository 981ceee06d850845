package webhooksdk

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Standard Webhooks headers, as the specification spells them. http.Header
// canonicalises them (Webhook-Id, …); HTTP header names are case-insensitive.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every secret's string form.
const SecretPrefix = "whsec_"

// Secret key sizes accepted by [ParseSecret], in bytes, as the Standard Webhooks
// specification recommends.
const (
	SecretMinBytes = 24
	SecretMaxBytes = 64
)

// DefaultTolerance is how far a webhook-timestamp may be from the verifier's clock, either
// way, when no tolerance is given.
const DefaultTolerance = 5 * time.Minute

// The ways verification fails. Every error [Verify] returns matches exactly one of them
// with errors.Is.
var (
	// ErrMissingHeaders: one of webhook-id, webhook-timestamp, webhook-signature is absent
	// or empty.
	ErrMissingHeaders = errors.New("missing webhook signature headers")
	// ErrInvalidTimestamp: webhook-timestamp is not an integer count of seconds.
	ErrInvalidTimestamp = errors.New("invalid webhook-timestamp")
	// ErrTimestampOutOfTolerance: the timestamp is too old or too far in the future (a
	// replay, or a clock skew larger than the tolerance).
	ErrTimestampOutOfTolerance = errors.New("webhook-timestamp outside tolerance")
	// ErrNoMatchingSignature: no v1 signature in webhook-signature matches any secret.
	ErrNoMatchingSignature = errors.New("no matching webhook signature")
)

// Secret is a parsed signing secret: the raw HMAC key of a "whsec_<base64>" string, with
// the per-key hashing state reused across calls so signing costs no key setup. The zero
// Secret is invalid. A Secret is safe for concurrent use and prints redacted.
type Secret struct {
	k *secretKey
}

type secretKey struct {
	raw  []byte
	pool sync.Pool // *macState
}

// macState is one reusable HMAC with scratch space for the "id.timestamp." prefix and
// the encoded signature.
type macState struct {
	h   hash.Hash
	buf [256]byte
	sum [sha256.Size]byte
}

// ParseSecret parses a "whsec_<base64>" secret. The base64 is standard (RFC 4648 §4, with
// padding) and must decode to SecretMinBytes..SecretMaxBytes bytes.
func ParseSecret(s string) (Secret, error) {
	enc, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return Secret{}, fmt.Errorf("parse secret: missing %q prefix", SecretPrefix)
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		// The base64 error quotes an offset, never the secret.
		return Secret{}, fmt.Errorf("parse secret: invalid base64: %w", err)
	}
	if len(raw) < SecretMinBytes || len(raw) > SecretMaxBytes {
		return Secret{}, fmt.Errorf("parse secret: key is %d bytes, want %d..%d", len(raw), SecretMinBytes, SecretMaxBytes)
	}
	return secretFromKey(raw), nil
}

// GenerateSecret returns a new random 32-byte secret in its "whsec_<base64>" form.
func GenerateSecret() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generate secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(raw), nil
}

func secretFromKey(raw []byte) Secret {
	k := &secretKey{raw: raw}
	k.pool.New = func() any { return &macState{h: hmac.New(sha256.New, k.raw)} }
	return Secret{k: k}
}

// String redacts the secret.
func (s Secret) String() string { return SecretPrefix + "[redacted]" }

// GoString redacts the secret.
func (s Secret) GoString() string { return s.String() }

// LogValue redacts the secret in log/slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// mac computes the raw HMAC-SHA256 of "msgID.unix(ts).body" into st.sum.
func (s Secret) mac(st *macState, msgID string, ts int64, body []byte) {
	st.h.Reset()
	p := st.buf[:0]
	if len(msgID)+22 <= len(st.buf) {
		p = append(p, msgID...)
		p = append(p, '.')
		p = strconv.AppendInt(p, ts, 10)
		p = append(p, '.')
		st.h.Write(p)
	} else { // an unusually long id: no scratch, still correct
		st.h.Write([]byte(msgID))
		p = append(p, '.')
		p = strconv.AppendInt(p, ts, 10)
		p = append(p, '.')
		st.h.Write(p)
	}
	st.h.Write(body)
	st.h.Sum(st.sum[:0])
}

func (s Secret) state() *macState {
	if s.k == nil {
		panic("webhooksdk: use of zero Secret; obtain one from ParseSecret")
	}
	return s.k.pool.Get().(*macState)
}

// Sign returns the Standard Webhooks signature "v1,<base64 HMAC-SHA256>" of
// "msgID.timestamp.body", timestamp being ts in whole Unix seconds. It panics on the zero
// Secret.
func Sign(secret Secret, msgID string, ts time.Time, body []byte) string {
	var b strings.Builder
	b.Grow(sigLen)
	appendSig(&b, secret, msgID, ts.Unix(), body)
	return b.String()
}

// sigLen is the length of one "v1,<base64 of 32 bytes>" signature.
var sigLen = len("v1,") + base64.StdEncoding.EncodedLen(sha256.Size)

func appendSig(b *strings.Builder, secret Secret, msgID string, ts int64, body []byte) {
	st := secret.state()
	defer secret.k.pool.Put(st)
	secret.mac(st, msgID, ts, body)
	enc := st.buf[:base64.StdEncoding.EncodedLen(sha256.Size)]
	base64.StdEncoding.Encode(enc, st.sum[:])
	b.WriteString("v1,")
	b.Write(enc)
}

// Signer signs with one or more secrets. With several (a rotation), the signature header
// carries one "v1,…" per secret, space-separated, so a receiver holding either the old or
// the new secret accepts it.
type Signer struct {
	secrets []Secret
}

// NewSigner parses each "whsec_…" secret. At least one is required.
func NewSigner(secrets ...string) (*Signer, error) {
	ps, err := parseSecrets(secrets)
	if err != nil {
		return nil, fmt.Errorf("new signer: %w", err)
	}
	return &Signer{secrets: ps}, nil
}

func parseSecrets(secrets []string) ([]Secret, error) {
	if len(secrets) == 0 {
		return nil, errors.New("no secrets")
	}
	ps := make([]Secret, 0, len(secrets))
	for i, s := range secrets {
		p, err := ParseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// Sign returns the webhook-signature header value: "v1,<sig>" per secret, joined by a
// single space.
func (s *Signer) Sign(msgID string, ts time.Time, body []byte) string {
	var b strings.Builder
	b.Grow(len(s.secrets) * (sigLen + 1))
	for i, sec := range s.secrets {
		if i > 0 {
			b.WriteByte(' ')
		}
		appendSig(&b, sec, msgID, ts.Unix(), body)
	}
	return b.String()
}

// SetHeaders sets webhook-id, webhook-timestamp and webhook-signature on h for body.
func (s *Signer) SetHeaders(h http.Header, msgID string, ts time.Time, body []byte) {
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, s.Sign(msgID, ts, body))
}

// Canonical forms of the header names, so lookups need no canonicalisation.
const (
	canonicalID        = "Webhook-Id"
	canonicalTimestamp = "Webhook-Timestamp"
	canonicalSignature = "Webhook-Signature"
)

// Verify checks a Standard Webhooks request: all three headers present, the timestamp
// within ±tolerance of now (DefaultTolerance if tolerance <= 0), and at least one "v1,"
// entry of the space-separated webhook-signature equal, in constant time, to the
// signature under at least one of secrets. Entries with another version are ignored.
// The error matches one of ErrMissingHeaders, ErrInvalidTimestamp,
// ErrTimestampOutOfTolerance, ErrNoMatchingSignature.
func Verify(secrets []Secret, headers http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	msgID := headers.Get(canonicalID)
	tsHeader := headers.Get(canonicalTimestamp)
	sigHeader := headers.Get(canonicalSignature)
	if msgID == "" || tsHeader == "" || sigHeader == "" {
		return ErrMissingHeaders
	}
	ts, ok := parseTimestamp(tsHeader)
	if !ok {
		return ErrInvalidTimestamp
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	tol := int64(tolerance / time.Second)
	if n := now.Unix(); ts < n-tol || ts > n+tol {
		return fmt.Errorf("%w: timestamp %d, now %d, tolerance %s", ErrTimestampOutOfTolerance, ts, n, tolerance)
	}
	sigs := []byte(sigHeader)
	for _, sec := range secrets {
		if sec.k == nil {
			continue
		}
		st := sec.k.pool.Get().(*macState)
		sec.mac(st, msgID, ts, body)
		want := st.buf[:base64.StdEncoding.EncodedLen(sha256.Size)]
		base64.StdEncoding.Encode(want, st.sum[:])
		ok := matchAny(sigs, want)
		sec.k.pool.Put(st)
		if ok {
			return nil
		}
	}
	return ErrNoMatchingSignature
}

// parseTimestamp reads a webhook-timestamp in the one form it is signed in
// (docs/protocol.md §3.2): decimal digits, no sign, no leading zero. A lenient parse
// ("+123", "0123") would check the signature over the number re-formatted rather than
// the text received.
func parseTimestamp(s string) (int64, bool) {
	if len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// matchAny reports whether any "v1,<sig>" entry of the space-separated list equals want.
// Every entry is compared in full; only the count of entries and their lengths leak.
func matchAny(list, want []byte) bool {
	found := 0
	for len(list) > 0 {
		var entry []byte
		if i := bytes.IndexByte(list, ' '); i >= 0 {
			entry, list = list[:i], list[i+1:]
		} else {
			entry, list = list, nil
		}
		sig, ok := cutV1(entry)
		if !ok {
			continue
		}
		found |= subtle.ConstantTimeCompare(sig, want)
	}
	return found == 1
}

func cutV1(entry []byte) ([]byte, bool) {
	if len(entry) < 3 || entry[0] != 'v' || entry[1] != '1' || entry[2] != ',' {
		return nil, false
	}
	return entry[3:], true
}
