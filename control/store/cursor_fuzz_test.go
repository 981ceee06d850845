package store

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/google/uuid"
)

// FuzzDecodeCursor: the keyset cursor of GET /resources comes back from
// clients. A cursor decodeCursor accepts names a position that encodes
// back to a cursor decoding to the same position, and every position
// encodes to a cursor that decodes to itself.
func FuzzDecodeCursor(f *testing.F) {
	id := "0b6e7c2e-4f4a-4a57-9c2b-5b1f0e6a9d11"
	f.Add(encodeCursor(time.UnixMicro(1700000000123456), id))
	f.Add(encodeCursor(time.UnixMicro(0), id))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("-1." + id)))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("99999999999999999999." + id)))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("1.{" + id + "}")))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("1")))
	f.Add("not base64!")
	f.Add("")
	f.Fuzz(func(t *testing.T, c string) {
		at, u, err := decodeCursor(c)
		if err != nil {
			return
		}
		again := encodeCursor(at, u.String())
		at2, u2, err := decodeCursor(again)
		if err != nil || !at2.Equal(at) || u2 != u {
			t.Fatalf("%q decoded to (%v, %v); its re-encoding %q to (%v, %v, %v)", c, at, u, again, at2, u2, err)
		}
	})
}

// FuzzCursorRoundTrip: any (created_at, id) position survives the trip.
func FuzzCursorRoundTrip(f *testing.F) {
	f.Add(int64(1700000000123456), []byte("0123456789abcdef"))
	f.Add(int64(-1), make([]byte, 16))
	f.Add(int64(-1<<63), []byte("ffffffffffffffff"))
	f.Fuzz(func(t *testing.T, micros int64, raw []byte) {
		u, err := uuid.FromBytes(raw)
		if err != nil {
			return
		}
		c := encodeCursor(time.UnixMicro(micros), u.String())
		at, u2, err := decodeCursor(c)
		if err != nil || at.UnixMicro() != micros || u2 != u {
			t.Fatalf("(%d, %v) encoded to %q, decoded to (%d, %v, %v)", micros, u, c, at.UnixMicro(), u2, err)
		}
	})
}
