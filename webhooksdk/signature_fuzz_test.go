package webhooksdk_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// The fuzz targets of the Standard Webhooks headers a provider verifies.
// `make fuzz` runs them; see docs/operations.md, "Fuzzing and mutation".

var (
	fuzzSecretA = webhooksdk.SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	fuzzSecretB = webhooksdk.SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 24))
	fuzzNow     = time.Unix(1_800_000_000, 0)
)

func fuzzSecrets(t testing.TB) []webhooksdk.Secret {
	var out []webhooksdk.Secret
	for _, s := range []string{fuzzSecretA, fuzzSecretB} {
		sec, err := webhooksdk.ParseSecret(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sec)
	}
	return out
}

// verifyErrs are the errors Verify may return; each failure matches one.
var verifyErrs = []error{webhooksdk.ErrMissingHeaders, webhooksdk.ErrInvalidTimestamp,
	webhooksdk.ErrTimestampOutOfTolerance, webhooksdk.ErrNoMatchingSignature}

func checkVerifyErr(t *testing.T, err error) {
	t.Helper()
	n := 0
	for _, e := range verifyErrs {
		if errors.Is(err, e) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("Verify error %v matches %d of the documented errors, want 1", err, n)
	}
}

// FuzzVerifyHeaders: Verify of arbitrary webhook-id, webhook-timestamp and
// webhook-signature headers and body never panics and fails with exactly
// one documented error, unless the signature header carries the signature
// Sign computes for them.
func FuzzVerifyHeaders(f *testing.F) {
	secrets := fuzzSecrets(f)
	signer, err := webhooksdk.NewSigner(fuzzSecretA)
	if err != nil {
		f.Fatal(err)
	}
	good := signer.Sign("msg_1", fuzzNow, []byte(`{"type":"health"}`))
	for _, s := range [][3]string{
		{"msg_1", strconv.FormatInt(fuzzNow.Unix(), 10), good},
		{"msg_1", strconv.FormatInt(fuzzNow.Unix(), 10), "v1a," + good[3:] + " " + good},
		{"msg_1", strconv.FormatInt(fuzzNow.Unix(), 10), "v2,abc v1," + good[3:len(good)-1]},
		{"msg_1", "+1800000000", good}, {"msg_1", "1800000000.0", good}, {"msg_1", "99999999999999999999", good},
		{"msg_1", "-9223372036854775808", good}, {"", "1", "v1,"}, {"msg_1", "1", "   "}, {"msg_1", "1", "v1"},
	} {
		f.Add(s[0], s[1], s[2], []byte(`{"type":"health"}`))
	}
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(webhooksdk.HeaderID, id)
		h.Set(webhooksdk.HeaderTimestamp, ts)
		h.Set(webhooksdk.HeaderSignature, sig)
		err := webhooksdk.Verify(secrets, h, body, fuzzNow, 0)
		if err != nil {
			checkVerifyErr(t, err)
			return
		}
		n, perr := strconv.ParseInt(h.Get(webhooksdk.HeaderTimestamp), 10, 64)
		if perr != nil {
			t.Fatalf("verified with the timestamp %q", ts)
		}
		at := time.Unix(n, 0)
		entries := bytes.Fields([]byte(h.Get(webhooksdk.HeaderSignature)))
		for _, sec := range secrets {
			want := []byte(webhooksdk.Sign(sec, h.Get(webhooksdk.HeaderID), at, body))
			for _, e := range entries {
				if bytes.Equal(e, want) {
					return
				}
			}
		}
		t.Fatalf("verified id %q ts %q sig %q body %q, which carries no signature of a secret", id, ts, sig, body)
	})
}

// FuzzSignVerify: a signature verifies, under either secret of a rotation;
// altering one byte of the body, the id, the signature or the timestamp
// makes it fail.
func FuzzSignVerify(f *testing.F) {
	f.Add("msg_1", int64(0), []byte(`{"type":"task"}`), uint16(0), byte(1))
	f.Add("msg_"+string(bytes.Repeat([]byte{'x'}, 300)), int64(-299), []byte{}, uint16(7), byte(0x80))
	f.Add("é", int64(300), []byte{0xff, 0}, uint16(65535), byte(0xff))
	secrets := fuzzSecrets(f)
	signer, err := webhooksdk.NewSigner(fuzzSecretA, fuzzSecretB)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id string, skew int64, body []byte, pos uint16, flip byte) {
		if id == "" || bytes.ContainsAny([]byte(id), "\r\n") || len(id) > 4096 {
			return // not a header value
		}
		at := fuzzNow.Add(time.Duration(skew%300) * time.Second)
		headers := func(id string, ts time.Time, sig string) http.Header {
			h := http.Header{}
			h.Set(webhooksdk.HeaderID, id)
			h.Set(webhooksdk.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
			h.Set(webhooksdk.HeaderSignature, sig)
			return h
		}
		sig := signer.Sign(id, at, body)
		for i := range secrets {
			if err := webhooksdk.Verify(secrets[i:i+1], headers(id, at, sig), body, fuzzNow, 0); err != nil {
				t.Fatalf("a good signature does not verify under secret %d: %v", i, err)
			}
		}
		if flip == 0 {
			flip = 1
		}
		fail := func(what string, h http.Header, body []byte) {
			t.Helper()
			err := webhooksdk.Verify(secrets, h, body, fuzzNow, 0)
			if err == nil {
				t.Fatalf("verified with an altered %s", what)
			}
			checkVerifyErr(t, err)
		}
		if len(body) > 0 {
			bad := bytes.Clone(body)
			bad[int(pos)%len(bad)] ^= flip
			fail("body", headers(id, at, sig), bad)
		}
		fail("body (extended)", headers(id, at, sig), append(bytes.Clone(body), flip))
		badID := []byte(id)
		badID[int(pos)%len(badID)] ^= flip
		if bytes.ContainsAny(badID, "\r\n\x00") || len(bytes.TrimSpace(badID)) == 0 {
			badID = append([]byte(id), 'x')
		}
		fail("id", headers(string(badID), at, sig), body)
		fail("timestamp", headers(id, at.Add(time.Duration(1+int(flip))*time.Second), sig), body)
		// Each entry of the rotation's header, one character changed to
		// another of the base64 alphabet (a padding '=' stays).
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
		for _, entry := range bytes.Fields([]byte(sig)) {
			i := 3 + int(pos)%(len(entry)-3)
			if entry[i] == '=' {
				i--
			}
			c := alphabet[int(flip)%len(alphabet)]
			if entry[i] == c {
				c = alphabet[(int(flip)+1)%len(alphabet)]
			}
			entry[i] = c
			fail("signature", headers(id, at, string(entry)), body)
		}
	})
}
