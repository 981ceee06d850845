package api_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// TestEndpointSuppliedSecret: the signing secret existed only in the answer
// that created an endpoint, so its provider could not hold it before the
// first health probes, which failed their signature check. An operator may
// now supply the secret on create; it is validated and never echoed.
func TestEndpointSuppliedSecret(t *testing.T) {
	t.Parallel()
	ec := endpointsConfig(t)
	b := setup(t, api.Config{Endpoints: ec})
	secretOf := func(n int) string {
		return "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5a}, n))
	}
	body := func(name, secret string) string {
		s := `{"name":"` + name + `","kinds":[{"kind":"vpc","kind_version":1}],"target":{"type":"https","url":"https://p.example/"}`
		if secret != "" {
			s += `,"secret":"` + secret + `"`
		}
		return s + `}`
	}
	stored := func(t *testing.T, name string) string {
		t.Helper()
		ds, err := b.st.DispatchEndpoints(t.Context(), ec.Box)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Name == name && d.SecretErr == nil && len(d.Secrets) > 0 {
				return d.Secrets[0].Secret.Reveal()
			}
		}
		t.Fatalf("no readable secret stored for %s", name)
		return ""
	}

	t.Run("Supplied", func(t *testing.T) {
		t.Parallel()
		secret := secretOf(24)
		r := b.do(http.MethodPost, "/api/v1/endpoints", body("supplied", secret)).wantApply(t, "created")
		if strings.Contains(string(r.body), secret) || r.object(t)["secret"] != nil {
			t.Fatalf("the supplied secret was echoed: %s", r.body)
		}
		if got := stored(t, "supplied"); got != secret {
			t.Fatal("the stored secret is not the supplied one")
		}
		// Re-applying the same document changes nothing and echoes nothing.
		r = b.do(http.MethodPost, "/api/v1/endpoints", body("supplied", secret)).wantApply(t, "unchanged")
		if strings.Contains(string(r.body), "whsec_") {
			t.Fatalf("re-apply shows a secret: %s", r.body)
		}
	})

	t.Run("Generated", func(t *testing.T) {
		t.Parallel()
		r := b.do(http.MethodPost, "/api/v1/endpoints", body("generated", "")).wantApply(t, "created")
		shown, _ := r.object(t)["secret"].(string)
		if !strings.HasPrefix(shown, "whsec_") || stored(t, "generated") != shown {
			t.Fatalf("generated secret %q not shown once or not stored", shown)
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ name, secret string }{
			{"NoPrefix", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))},
			{"TooShort", secretOf(23)},
			{"TooLong", secretOf(65)},
			{"NotBase64", "whsec_not*base64*at*all*but*long*enough*to*pass"},
			{"URLBase64", "whsec_" + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32))},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := b.do(http.MethodPost, "/api/v1/endpoints", body("bad-"+strings.ToLower(tc.name), tc.secret))
				r.wantProblem(t, http.StatusUnprocessableEntity, "body.secret")
				if strings.Contains(string(r.body), tc.secret) {
					t.Fatalf("the refused secret was echoed: %s", r.body)
				}
			})
		}
		if n := b.count(`SELECT count(*) FROM endpoints WHERE name LIKE 'bad-%'`); n != 0 {
			t.Fatalf("%d endpoints created with a refused secret", n)
		}
	})
}

// TestEndpointMaxBatch: max_batch defaults to 1, is stored and shown, and a
// value outside 1..256 is a problem naming the field.
func TestEndpointMaxBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Endpoints: endpointsConfig(t)})
	body := func(name, extra string) string {
		return `{"name":"` + name + `","kinds":[{"kind":"vpc","kind_version":1}],"target":{"type":"https","url":"https://p.example/"}` + extra + `}`
	}
	r := b.do(http.MethodPost, "/api/v1/endpoints", body("plain", "")).wantApply(t, "created")
	if got := r.object(t)["max_batch"]; got != float64(1) {
		t.Fatalf("default max_batch = %v, want 1", got)
	}
	b.do(http.MethodPost, "/api/v1/endpoints", body("batched", `,"max_batch":32`)).wantApply(t, "created")
	if got := b.do(http.MethodGet, "/api/v1/endpoints/batched", "").object(t)["max_batch"]; got != float64(32) {
		t.Fatalf("stored max_batch = %v, want 32", got)
	}
	b.do(http.MethodPost, "/api/v1/endpoints", body("batched", `,"max_batch":8`)).wantApply(t, "configured")
	for _, bad := range []string{"257", "-1"} {
		b.do(http.MethodPost, "/api/v1/endpoints", body("bad", `,"max_batch":`+bad)).
			wantProblem(t, http.StatusUnprocessableEntity, "body.max_batch")
	}
}

// TestEndpointRateLimit: rate_limit, burst (defaulting to ceil(rate_limit))
// and rate_adaptive are stored and shown with the shared bucket's state; bad
// values are problems naming the field, and nothing is written.
func TestEndpointRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Endpoints: endpointsConfig(t)})
	body := func(name, extra string) string {
		return `{"name":"` + name + `","kinds":[{"kind":"vpc","kind_version":1}],"target":{"type":"https","url":"https://p.example/"}` + extra + `}`
	}
	r := b.do(http.MethodPost, "/api/v1/endpoints", body("limited", `,"rate_limit":2.5,"rate_adaptive":true`)).wantApply(t, "created")
	o := r.object(t)
	if o["rate_limit"] != 2.5 || o["burst"] != float64(3) || o["rate_adaptive"] != true {
		t.Fatalf("rate_limit %v, burst %v, rate_adaptive %v; want 2.5, 3, true", o["rate_limit"], o["burst"], o["rate_adaptive"])
	}
	got := b.do(http.MethodGet, "/api/v1/endpoints/limited", "").object(t)
	if st, _ := got["rate_state"].(map[string]any); st == nil || st["effective_rate"] != 2.5 || st["waited"] != float64(0) {
		t.Fatalf("rate_state = %v, want effective_rate 2.5, waited 0", got["rate_state"])
	}
	b.do(http.MethodPost, "/api/v1/endpoints", body("limited", `,"rate_limit":20,"burst":5`)).wantApply(t, "configured")
	if got := b.do(http.MethodGet, "/api/v1/endpoints/limited", "").object(t); got["burst"] != float64(5) || got["rate_adaptive"] != nil {
		t.Fatalf("after re-apply: burst %v, rate_adaptive %v; want 5, omitted", got["burst"], got["rate_adaptive"])
	}
	if got := b.do(http.MethodGet, "/api/v1/endpoints/limited", "").object(t); got["rate_limit"] != float64(20) {
		t.Fatalf("rate_limit = %v, want 20", got["rate_limit"])
	}
	for _, tc := range []struct{ extra, field string }{
		{`,"rate_limit":0`, "body.rate_limit"},
		{`,"rate_limit":-3`, "body.rate_limit"},
		{`,"rate_limit":10,"burst":0`, "body.burst"},
		{`,"burst":4`, "body.burst"},
		{`,"rate_adaptive":true`, "body.rate_adaptive"},
	} {
		b.do(http.MethodPost, "/api/v1/endpoints", body("bad", tc.extra)).wantProblem(t, http.StatusUnprocessableEntity, tc.field)
	}
	b.do(http.MethodGet, "/api/v1/endpoints/bad", "").wantProblem(t, http.StatusNotFound, "")
}
