package store

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
)

// SecretKeyBytes is the size of a SecretBox key: AES-256.
const SecretKeyBytes = 32

// ErrSecretUndecryptable means a stored secret could not be opened with any
// key the SecretBox holds: the key changed without keeping the old one as a
// previous key, or the row was tampered with.
var ErrSecretUndecryptable = errors.New("stored secret cannot be decrypted with the configured keys")

// SecretBox encrypts secrets at rest (today: endpoint signing secrets) with
// AES-256-GCM. The key comes from the environment (CONVERGE_SECRET_KEY) or,
// in dev mode, from a key the caller derives and persists; the box never
// reads the environment itself.
//
// A sealed blob is: version byte (1) | key id (4 bytes) | nonce (12) |
// ciphertext+tag. The key id lets a box that holds the current key and the
// previous ones (a key rotation) open old rows without trial decryption, and
// the additional data binds each blob to its row, so a ciphertext copied into
// another endpoint's row does not open.
//
// SetKeys swaps the keys of a box in use (a rotation picked up while
// running); each Seal or Open sees one set whole.
type SecretBox struct {
	keys atomic.Pointer[[]boxKey] // [0] seals; all open
}

type boxKey struct {
	id   [4]byte
	aead cipher.AEAD
}

const sealVersion = 1

// NewSecretBox returns a box sealing with key and opening with key or any of
// previous. Every key must be SecretKeyBytes long.
func NewSecretBox(key []byte, previous ...[]byte) (*SecretBox, error) {
	b := &SecretBox{}
	if err := b.SetKeys(key, previous...); err != nil {
		return nil, err
	}
	return b, nil
}

// SetKeys makes key the box's sealing key and key and previous the keys it
// opens with. On an error the box keeps its keys.
func (b *SecretBox) SetKeys(key []byte, previous ...[]byte) error {
	var keys []boxKey
	for i, k := range append([][]byte{key}, previous...) {
		if len(k) != SecretKeyBytes {
			return fmt.Errorf("secret box: key %d is %d bytes, want %d", i, len(k), SecretKeyBytes)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return fmt.Errorf("secret box: %w", err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return fmt.Errorf("secret box: %w", err)
		}
		keys = append(keys, boxKey{id: keyID(k), aead: aead})
	}
	b.keys.Store(&keys)
	return nil
}

// ParseSecretKey decodes a base64 (standard or URL alphabet, padded or not)
// SecretKeyBytes-byte key, the form CONVERGE_SECRET_KEY takes. The error never
// quotes the value.
func ParseSecretKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			if len(k) != SecretKeyBytes {
				return nil, fmt.Errorf("secret key decodes to %d bytes, want %d", len(k), SecretKeyBytes)
			}
			return k, nil
		}
	}
	return nil, errors.New("secret key is not valid base64")
}

// sealedKeyID is the id of the key blob was sealed with, as SQL reads it:
// substring(blob from 2 for 4).
func sealedKeyID(k []byte) []byte {
	id := keyID(k)
	return id[:]
}

func keyID(k []byte) [4]byte {
	h := sha256.Sum256(append([]byte("converge secretbox key id\x00"), k...))
	return [4]byte(h[:4])
}

// Seal encrypts plaintext bound to aad (the owning row's identity).
func (b *SecretBox) Seal(plaintext, aad []byte) ([]byte, error) {
	k := (*b.keys.Load())[0]
	out := make([]byte, 0, 1+4+k.aead.NonceSize()+len(plaintext)+k.aead.Overhead())
	out = append(out, sealVersion)
	out = append(out, k.id[:]...)
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal secret: %w", err)
	}
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, plaintext, aad), nil
}

// Open decrypts a blob made by Seal with the same aad. It fails with
// ErrSecretUndecryptable if no key of the box opens it.
func (b *SecretBox) Open(blob, aad []byte) ([]byte, error) {
	if len(blob) < 5 || blob[0] != sealVersion {
		return nil, fmt.Errorf("%w: unknown format", ErrSecretUndecryptable)
	}
	id := [4]byte(blob[1:5])
	for _, k := range *b.keys.Load() {
		if k.id != id {
			continue
		}
		ns := k.aead.NonceSize()
		if len(blob) < 5+ns+k.aead.Overhead() {
			return nil, fmt.Errorf("%w: truncated", ErrSecretUndecryptable)
		}
		pt, err := k.aead.Open(nil, blob[5:5+ns], blob[5+ns:], aad)
		if err != nil {
			return nil, fmt.Errorf("%w: authentication failed", ErrSecretUndecryptable)
		}
		return pt, nil
	}
	return nil, fmt.Errorf("%w: sealed with an unknown key", ErrSecretUndecryptable)
}

// EndpointSecret is an endpoint's signing secret in its "whsec_<base64>"
// form. It exists in plaintext only in memory: it is stored sealed, shown to
// the operator once (create and rotate-secret), and handed to the dispatcher
// for signing. Every printing path redacts it (fmt, %#v, log/slog, JSON); call
// Reveal where the plaintext is really meant to leave the process.
type EndpointSecret string

const redactedSecret = "whsec_[redacted]"

// Reveal returns the plaintext secret.
func (s EndpointSecret) Reveal() string { return string(s) }

// String redacts the secret.
func (s EndpointSecret) String() string { return redactedSecret }

// GoString redacts the secret.
func (s EndpointSecret) GoString() string { return redactedSecret }

// LogValue redacts the secret in log/slog output.
func (s EndpointSecret) LogValue() slog.Value { return slog.StringValue(redactedSecret) }

// MarshalJSON redacts the secret, so a struct holding one cannot leak it
// through an encoder by accident.
func (s EndpointSecret) MarshalJSON() ([]byte, error) { return []byte(`"` + redactedSecret + `"`), nil }
