package callback

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergeplane/converge/control/model"
)

// TokenKeyMinBytes is the shortest accepted token key.
const TokenKeyMinBytes = 32

// Token verification errors; each answers 401.
var (
	// ErrBadToken: not a token this cluster minted (forged, truncated,
	// signed with an unknown key).
	ErrBadToken = errors.New("invalid callback token")
	// ErrTokenExpired: a genuine token past its expiry.
	ErrTokenExpired = errors.New("callback token expired")
)

// Claim is what a callback token grants: the right to complete (or
// heartbeat) one claim of one task until Expires. It carries what the
// receiving pod needs to fence and check the outcome without state of its
// own: the claim's identity, the reaction's emits mask, and the task
// deadline (which bounds how far a heartbeat may extend the lease).
type Claim struct {
	TaskID string // a UUID
	// ResourceID (a UUID) lets a repeat of a completion be recognised as a
	// duplicate once its outcome has finished the task. Optional.
	ResourceID string
	// Endpoint, Attempt and Issued describe the delivery the token went out
	// with, so a failure reported by callback is recorded against it
	// (endpoint_deliveries). Optional; Endpoint is at most 255 bytes.
	Endpoint   string
	Attempt    int
	Issued     time.Time
	Shard      int16
	ClaimEpoch int64
	Emits      model.OutcomeMask
	Deadline   time.Time // zero: the task has none
	Expires    time.Time
}

// Task returns the claim in the form the engine fences on.
func (c Claim) Task() model.Task {
	return model.Task{ID: c.TaskID, ResourceID: c.ResourceID, Shard: c.Shard, ClaimEpoch: c.ClaimEpoch, Emits: c.Emits, Deadline: c.Deadline}
}

// Tokens mints and verifies callback tokens with a key every dispatch pod
// shares, so any pod verifies any token with no lookup. A token is
//
//	base64url( v2 | task_id (16) | resource_id (16, zero = none) | shard (2) |
//	           epoch (8) | emits (1) | deadline unix ms (8, 0 = none) |
//	           expires unix s (8) | issued unix ms (8) | attempt (2) |
//	           endpoint length (1) | endpoint |
//	           HMAC-SHA256(key, all of the above) (32) )
//
// Opaque to providers; only the HMAC makes it unforgeable. Keys rotate by
// minting with the new key while still verifying with the previous ones;
// SetKeys swaps them in use, each Mint or Verify seeing one set whole.
type Tokens struct {
	keys atomic.Pointer[[]*macPool] // [0] mints
}

type macPool struct{ p sync.Pool }

func newMacPool(key []byte) *macPool {
	k := append([]byte(nil), key...)
	m := &macPool{}
	m.p.New = func() any { return hmac.New(sha256.New, k) }
	return m
}

func (m *macPool) sum(dst, msg []byte) []byte {
	h := m.p.Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	dst = h.Sum(dst)
	m.p.Put(h)
	return dst
}

const (
	tokenVersion = 2
	tokenFixed   = 1 + 16 + 16 + 2 + 8 + 1 + 8 + 8 + 8 + 2 + 1 // then the endpoint name
	tokenMaxLen  = tokenFixed + 255 + sha256.Size
)

// NewTokens returns Tokens minting with key and also accepting tokens of
// previous keys. Keys must be at least TokenKeyMinBytes long.
func NewTokens(key []byte, previous ...[]byte) (*Tokens, error) {
	t := &Tokens{}
	if err := t.SetKeys(key, previous...); err != nil {
		return nil, err
	}
	return t, nil
}

// SetKeys makes key the key t mints with, and key and previous the keys it
// verifies with. On an error t keeps its keys.
func (t *Tokens) SetKeys(key []byte, previous ...[]byte) error {
	var keys []*macPool
	for i, k := range append([][]byte{key}, previous...) {
		if len(k) < TokenKeyMinBytes {
			return fmt.Errorf("callback token key %d is %d bytes, want at least %d", i, len(k), TokenKeyMinBytes)
		}
		keys = append(keys, newMacPool(k))
	}
	t.keys.Store(&keys)
	return nil
}

// Mint returns the token for c. c.TaskID must be a UUID.
func (t *Tokens) Mint(c Claim) (string, error) {
	if len(c.Endpoint) > 255 {
		return "", fmt.Errorf("mint callback token: endpoint name is %d bytes, over 255", len(c.Endpoint))
	}
	var arr [tokenMaxLen]byte
	body := tokenFixed + len(c.Endpoint)
	b := arr[:body+sha256.Size]
	b[0] = tokenVersion
	if err := parseUUID(b[1:17], c.TaskID); err != nil {
		return "", fmt.Errorf("mint callback token: %w", err)
	}
	if c.ResourceID != "" {
		if err := parseUUID(b[17:33], c.ResourceID); err != nil {
			return "", fmt.Errorf("mint callback token: resource %w", err)
		}
	}
	const o = 33
	binary.BigEndian.PutUint16(b[o:o+2], uint16(c.Shard))
	binary.BigEndian.PutUint64(b[o+2:o+10], uint64(c.ClaimEpoch))
	b[o+10] = byte(c.Emits)
	if !c.Deadline.IsZero() {
		binary.BigEndian.PutUint64(b[o+11:o+19], uint64(c.Deadline.UnixMilli()))
	}
	binary.BigEndian.PutUint64(b[o+19:o+27], uint64(c.Expires.Unix()))
	if !c.Issued.IsZero() {
		binary.BigEndian.PutUint64(b[o+27:o+35], uint64(c.Issued.UnixMilli()))
	}
	binary.BigEndian.PutUint16(b[o+35:o+37], uint16(min(max(c.Attempt, 0), 65535)))
	b[o+37] = byte(len(c.Endpoint))
	copy(b[tokenFixed:body], c.Endpoint)
	(*t.keys.Load())[0].sum(b[:body], b[:body])
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Verify returns the claim tok grants at now, or ErrBadToken /
// ErrTokenExpired.
func (t *Tokens) Verify(tok string, now time.Time) (Claim, error) {
	var arr [tokenMaxLen]byte
	if dl := base64.RawURLEncoding.DecodedLen(len(tok)); dl < tokenFixed+sha256.Size || dl > tokenMaxLen {
		return Claim{}, ErrBadToken
	}
	// Strict, and the length checked against the decoded bytes: a token
	// verifies only in the one encoding Mint writes, not with other
	// trailing bits or with a CR or LF (which the decoder skips) inserted.
	n, err := base64.RawURLEncoding.Strict().Decode(arr[:], []byte(tok))
	if err != nil || n < tokenFixed+sha256.Size || arr[0] != tokenVersion || base64.RawURLEncoding.EncodedLen(n) != len(tok) {
		return Claim{}, ErrBadToken
	}
	b := arr[:n]
	body := tokenFixed + int(b[tokenFixed-1])
	if n != body+sha256.Size {
		return Claim{}, ErrBadToken
	}
	var want [sha256.Size]byte
	ok := 0
	for _, k := range *t.keys.Load() {
		ok |= subtle.ConstantTimeCompare(k.sum(want[:0], b[:body]), b[body:])
	}
	if ok != 1 {
		return Claim{}, ErrBadToken
	}
	const o = 33
	c := Claim{
		TaskID:     formatUUID(b[1:17]),
		Shard:      int16(binary.BigEndian.Uint16(b[o : o+2])),
		ClaimEpoch: int64(binary.BigEndian.Uint64(b[o+2 : o+10])),
		Emits:      model.OutcomeMask(b[o+10]),
		Expires:    time.Unix(int64(binary.BigEndian.Uint64(b[o+19:o+27])), 0),
		Attempt:    int(binary.BigEndian.Uint16(b[o+35 : o+37])),
		Endpoint:   string(b[tokenFixed:body]),
	}
	if ms := int64(binary.BigEndian.Uint64(b[o+27 : o+35])); ms != 0 {
		c.Issued = time.UnixMilli(ms)
	}
	if [16]byte(b[17:33]) != [16]byte{} {
		c.ResourceID = formatUUID(b[17:33])
	}
	if ms := int64(binary.BigEndian.Uint64(b[o+11 : o+19])); ms != 0 {
		c.Deadline = time.UnixMilli(ms)
	}
	if !now.Before(c.Expires) {
		return Claim{}, ErrTokenExpired
	}
	return c, nil
}

func parseUUID(dst []byte, s string) error {
	j := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			continue
		}
		if j >= 32 {
			return fmt.Errorf("task id %q is not a UUID", s)
		}
		v, ok := unhex(s[i])
		if !ok {
			return fmt.Errorf("task id %q is not a UUID", s)
		}
		if j%2 == 0 {
			dst[j/2] = v << 4
		} else {
			dst[j/2] |= v
		}
		j++
	}
	if j != 32 {
		return fmt.Errorf("task id %q is not a UUID", s)
	}
	return nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func formatUUID(b []byte) string {
	const hexdig = "0123456789abcdef"
	var out [36]byte
	j := 0
	for i, v := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = hexdig[v>>4], hexdig[v&0xf]
		j += 2
	}
	return string(out[:])
}

// CanonicalTaskID returns the canonical (lowercase, dashed) form of a UUID
// task id, so a path id is compared with a token's exactly.
func CanonicalTaskID(s string) (string, bool) {
	var b [16]byte
	if parseUUID(b[:], s) != nil {
		return "", false
	}
	return formatUUID(b[:]), true
}

// LeaseFor is how long an accepted (202) task's claim should last from now,
// and how far each heartbeat extends it: until the task deadline plus grace
// (the window in which the provider may still call back), or asyncLease for
// a task without a deadline. Both the dispatcher, when it sees the 202, and
// the heartbeat handler use it, so a heartbeat never shortens a lease or
// extends one past the deadline.
func LeaseFor(deadline time.Time, asyncLease, grace time.Duration, now time.Time) time.Duration {
	if deadline.IsZero() {
		return asyncLease
	}
	return max(deadline.Add(grace).Sub(now), time.Second)
}
