package callback

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/wire"
)

// The fuzz targets of what a provider sends back: the bearer token and the
// outcome and heartbeat bodies. `make fuzz` runs them; see
// docs/operations.md, "Fuzzing and mutation".

var (
	fuzzKey  = bytes.Repeat([]byte{7}, TokenKeyMinBytes)
	fuzzOld  = bytes.Repeat([]byte{9}, TokenKeyMinBytes)
	fuzzNow  = time.Unix(1_800_000_000, 0)
	fuzzTask = "0b6e7c2e-4f4a-4a57-9c2b-5b1f0e6a9d11"
)

func fuzzTokens(t testing.TB) *Tokens {
	tk, err := NewTokens(fuzzKey, fuzzOld)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// fuzzClaim builds a claim from fuzzed fields: ids from up to 16 bytes, an
// expiry after fuzzNow. Mint refuses it only for an endpoint over 255 bytes.
func fuzzClaim(task, resource []byte, endpoint string, attempt uint16, shard int16, claimEpoch int64, emits uint8, deadlineMS, issuedMS, expiresIn int64) Claim {
	return Claim{
		TaskID: formatUUID(pad16(task)), ResourceID: formatUUID(pad16(resource)), Endpoint: endpoint,
		Attempt: int(attempt), Shard: shard, ClaimEpoch: claimEpoch, Emits: model.OutcomeMask(emits),
		Deadline: unixMilliOrZero(deadlineMS), Issued: unixMilliOrZero(issuedMS),
		Expires: fuzzNow.Add(time.Duration(1+uint64(expiresIn)%(1<<32)) * time.Second),
	}
}

func pad16(b []byte) []byte {
	var out [16]byte
	copy(out[:], b)
	return out[:]
}

func unixMilliOrZero(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func addClaimSeeds(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), []byte("fedcba9876543210"), "ep-a", uint16(1), int16(3), int64(7), uint8(3), int64(1_800_000_600_000), int64(1_799_999_999_000), int64(600))
	f.Add([]byte{}, []byte{}, "", uint16(0), int16(-1), int64(-1), uint8(0), int64(0), int64(0), int64(0))
	f.Add([]byte{0xff}, []byte{}, string(bytes.Repeat([]byte{'e'}, 255)), uint16(65535), int16(-32768), int64(1<<62), uint8(255), int64(-5), int64(1), int64(1<<50))
}

// FuzzTokenRoundTrip: a minted token verifies to the claim it was minted
// for, and minting that claim again gives the same token; changing any one
// character of it, cutting it short or extending it makes it fail.
func FuzzTokenRoundTrip(f *testing.F) {
	addClaimSeeds(f)
	tk := fuzzTokens(f)
	f.Fuzz(func(t *testing.T, task, resource []byte, endpoint string, attempt uint16, shard int16, claimEpoch int64, emits uint8, deadlineMS, issuedMS, expiresIn int64) {
		c := fuzzClaim(task, resource, endpoint, attempt, shard, claimEpoch, emits, deadlineMS, issuedMS, expiresIn)
		tok, err := tk.Mint(c)
		if len(endpoint) > 255 {
			if err == nil {
				t.Fatal("minted a token with an endpoint over 255 bytes")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := tk.Verify(tok, fuzzNow)
		if err != nil {
			t.Fatalf("a fresh token does not verify: %v", err)
		}
		if c.ResourceID == formatUUID(make([]byte, 16)) {
			c.ResourceID = "" // the zero id means none
		}
		if got.TaskID != c.TaskID || got.ResourceID != c.ResourceID || got.Endpoint != c.Endpoint || got.Attempt != c.Attempt ||
			got.Shard != c.Shard || got.ClaimEpoch != c.ClaimEpoch || got.Emits != c.Emits || !got.Deadline.Equal(c.Deadline) ||
			!got.Issued.Equal(c.Issued) || got.Expires.Unix() != c.Expires.Unix() {
			t.Fatalf("minted %+v, verified %+v", c, got)
		}
		if again, err := tk.Mint(got); err != nil || again != tok {
			t.Fatalf("minting the verified claim gave %q (%v), want %q", again, err, tok)
		}
		if _, err := tk.Verify(tok, c.Expires); !errors.Is(err, ErrTokenExpired) {
			t.Fatalf("at its expiry the token gave %v, want ErrTokenExpired", err)
		}
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		// Every position, each changed to a character the fuzzed emits and
		// attempt steer; then the token cut short and extended.
		var bad []string
		for i := range len(tok) {
			repl := alphabet[(int(emits)+int(attempt)+i)%len(alphabet)]
			if tok[i] == repl {
				repl = alphabet[(int(emits)+int(attempt)+i+1)%len(alphabet)]
			}
			bad = append(bad, tok[:i]+string(repl)+tok[i+1:])
		}
		cut := int(uint64(claimEpoch) % uint64(len(tok)))
		bad = append(bad, tok[:cut], tok+string(alphabet[int(emits)%len(alphabet)]))
		for _, b := range bad {
			if got, err := tk.Verify(b, fuzzNow); err == nil {
				t.Fatalf("the altered token %q (from %q) verified: %+v", b, tok, got)
			}
		}
	})
}

// FuzzTokenVerify: Verify of any string answers ErrBadToken or
// ErrTokenExpired, or a claim that minted again gives that very string
// (only a token this cluster minted verifies, in its one encoding).
func FuzzTokenVerify(f *testing.F) {
	tk := fuzzTokens(f)
	for _, c := range []Claim{
		{TaskID: fuzzTask, Expires: fuzzNow.Add(time.Hour)},
		{TaskID: fuzzTask, ResourceID: fuzzTask, Endpoint: "ep", Attempt: 2, ClaimEpoch: 9, Emits: 7, Expires: fuzzNow.Add(time.Minute),
			Deadline: fuzzNow.Add(time.Second), Issued: fuzzNow},
	} {
		tok, err := tk.Mint(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok)
		f.Add(tok[:len(tok)-1])
		f.Add(tok + "A")
	}
	f.Add("")
	f.Add("Bearer x")
	var single []*Tokens // each key alone, to mint again with the key that verified
	for _, k := range [][]byte{fuzzKey, fuzzOld} {
		one, err := NewTokens(k)
		if err != nil {
			f.Fatal(err)
		}
		single = append(single, one)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := tk.Verify(tok, fuzzNow)
		if err != nil {
			if !errors.Is(err, ErrBadToken) && !errors.Is(err, ErrTokenExpired) {
				t.Fatalf("Verify failed with %v", err)
			}
			return
		}
		for _, one := range single {
			if again, err := one.Mint(c); err == nil && again == tok {
				return
			}
		}
		t.Fatalf("%q verified as %+v, which no key mints as that token", tok, c)
	})
}

// FuzzOutcomeBody: the outcome body decoder (wire.DecodeResult, which the
// outcome handler calls with the token's claim) accepts exactly one of
// outcome and error, only for the token's task and epoch, and what it
// accepts, sent back as the SDK sends it, is accepted the same way.
func FuzzOutcomeBody(f *testing.F) {
	for _, s := range []string{
		`{"outcome":{"status":{"ok":true}}}`,
		`{"task_id":"` + fuzzTask + `","claim_epoch":7,"outcome":{"status":{}}}`,
		`{"error":{"message":"boom","transient":true}}`,
		`{"outcome":{},"error":{"message":"x"}}`,
		`{"claim_epoch":0,"outcome":{}}`,
		`{"claim_epoch":null,"outcome":{}}`,
		`{"task_id":"other","outcome":{}}`,
		`{"outcome":null}`, `{}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		res, err := wire.DecodeResult(body, fuzzTask, 7)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformedResult) {
				t.Fatalf("error %v does not match ErrMalformedResult", err)
			}
			return
		}
		if (res.Outcome == nil) == (res.Error == nil) {
			t.Fatalf("accepted %q with outcome %v and error %v", body, res.Outcome, res.Error)
		}
		if res.TaskID != "" && res.TaskID != fuzzTask || res.ClaimEpoch != 0 && res.ClaimEpoch != 7 {
			t.Fatalf("accepted %q for task %q epoch %d", body, res.TaskID, res.ClaimEpoch)
		}
		// The SDK sends a result with the claim's task_id and claim_epoch.
		res.TaskID, res.ClaimEpoch = fuzzTask, 7
		again, err := json.Marshal(res)
		if err != nil {
			t.Fatalf("cannot encode the accepted result: %v", err)
		}
		res2, err := wire.DecodeResult(again, fuzzTask, 7)
		if err != nil {
			t.Fatalf("accepted %q but not its re-encoding %q: %v", body, again, err)
		}
		if again2, _ := json.Marshal(res2); !bytes.Equal(again, again2) {
			t.Fatalf("round trip changed the result:\n%s\n%s", again, again2)
		}
	})
}

// FuzzHeartbeatBody: a heartbeat body passes checkEcho only when its
// claim_epoch is absent, null or the token's.
func FuzzHeartbeatBody(f *testing.F) {
	for _, s := range []string{
		`{"task_id":"` + fuzzTask + `","claim_epoch":7}`, `{"claim_epoch":null}`, `{}`,
		`{"claim_epoch":0}`, `{"claim_epoch":"7"}`, `{"claim_epoch":7.0}`, `{"CLAIM_EPOCH":8}`,
		`{"claim_epoch":7,"claim_epoch":8}`, `[]`, `7`, ``,
	} {
		f.Add([]byte(s))
	}
	c := Claim{TaskID: fuzzTask, ClaimEpoch: 7}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := checkEcho(body, c)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformedResult) {
				t.Fatalf("error %v does not match ErrMalformedResult", err)
			}
			return
		}
		var echo struct {
			ClaimEpoch *int64 `json:"claim_epoch"`
		}
		if json.Unmarshal(body, &echo) != nil || echo.ClaimEpoch != nil && *echo.ClaimEpoch != c.ClaimEpoch {
			t.Fatalf("passed %q for epoch %d", body, c.ClaimEpoch)
		}
	})
}
