package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/webhooksdk"
)

type endpointBundle struct {
	db  *pgtest.Database
	st  *store.Store
	box *store.SecretBox
	ctx context.Context
}

func endpointSetup(t *testing.T) *endpointBundle {
	t.Helper()
	db := pgtest.New(t)
	key := make([]byte, store.SecretKeyBytes)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	box, err := store.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return &endpointBundle{db: db, st: store.New(db.Pool, store.Config{}), box: box, ctx: ctx}
}

func endpointParams(name string) store.PutEndpointParams {
	return store.PutEndpointParams{
		Name:   name,
		Kinds:  []store.EndpointKind{{Kind: "vpc", KindVersion: 1}, {Kind: "vpc", KindVersion: 2}},
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "https://net.example.com:8443/converge"},
		Health: store.EndpointHealth{URL: "https://net.example.com:8443/converge/health", IntervalSecs: 10},
	}
}

func TestEndpointCRUD(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)

	created, secret, err := b.st.CreateEndpoint(b.ctx, b.box, endpointParams("networking"))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := webhooksdk.ParseSecret(secret.Reveal()); err != nil {
		t.Fatalf("created secret is not a valid whsec_ secret: %v", err)
	}
	want := store.Endpoint{
		Name:               "networking",
		Namespace:          store.DefaultNamespace,
		Kinds:              []store.EndpointKind{{Kind: "vpc", KindVersion: 1}, {Kind: "vpc", KindVersion: 2}},
		Target:             store.EndpointTarget{Type: "https", URL: "https://net.example.com:8443/converge"},
		Health:             store.EndpointHealth{URL: "https://net.example.com:8443/converge/health", IntervalSecs: 10},
		MaxConcurrency:     store.EndpointMaxConcurrencyDefault,
		MaxBatch:           1,
		RequestTimeoutSecs: store.EndpointRequestTimeoutDefault,
		Enabled:            true,
	}
	if created.ResourceVersion < 1 {
		t.Errorf("created.ResourceVersion = %d, want a version (>= 1)", created.ResourceVersion)
	}
	want.ResourceVersion = created.ResourceVersion
	ignoreTimes := cmpopts.IgnoreFields(store.Endpoint{}, "CreatedAt", "UpdatedAt")
	if d := cmp.Diff(want, created, ignoreTimes); d != "" {
		t.Errorf("created (-want +got):\n%s", d)
	}

	t.Run("create twice is a conflict", func(t *testing.T) {
		_, _, err := b.st.CreateEndpoint(b.ctx, b.box, endpointParams("networking"))
		var ce *store.ConflictError
		if !errors.As(err, &ce) {
			t.Fatalf("err = %v, want *ConflictError", err)
		}
	})

	t.Run("get and list never carry the secret", func(t *testing.T) {
		got, err := b.st.GetEndpoint(b.ctx, "networking")
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got, ignoreTimes); d != "" {
			t.Errorf("get (-want +got):\n%s", d)
		}
		list, err := b.st.ListEndpoints(b.ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		js, _ := json.Marshal(list)
		if strings.Contains(string(js), strings.TrimPrefix(secret.Reveal(), "whsec_")) {
			t.Error("list JSON contains the secret")
		}
		if len(list) != 1 {
			t.Errorf("list has %d endpoints, want 1", len(list))
		}
	})

	t.Run("put is idempotent and reports what it did", func(t *testing.T) {
		p := endpointParams("networking")
		_, res, sec, err := b.st.PutEndpoint(b.ctx, b.box, p)
		if err != nil || res != store.ApplyUnchanged || sec != "" {
			t.Fatalf("re-put = %v, %q, secret set %v; want unchanged without a secret", err, res, sec != "")
		}
		p.MaxConcurrency = 8
		e, res, sec, err := b.st.PutEndpoint(b.ctx, b.box, p)
		if err != nil || res != store.ApplyConfigured || sec != "" || e.MaxConcurrency != 8 || e.MaxBatch != 1 {
			t.Fatalf("put = %+v, %v, %q; want configured with max_concurrency 8, max_batch 1", e, err, res)
		}
		p.MaxBatch = 32
		e, res, _, err = b.st.PutEndpoint(b.ctx, b.box, p)
		if err != nil || res != store.ApplyConfigured || e.MaxBatch != 32 {
			t.Fatalf("put max_batch 32 = %+v, %v, %q; want configured with max_batch 32", e, err, res)
		}
		if got, err := b.st.GetEndpoint(b.ctx, p.Name); err != nil || got.MaxBatch != 32 {
			t.Fatalf("get = max_batch %d, %v; want 32", got.MaxBatch, err)
		}
		_, res, sec, err = b.st.PutEndpoint(b.ctx, b.box, endpointParams("other"))
		if err != nil || res != store.ApplyCreated || sec == "" {
			t.Fatalf("put new = %v, %q, secret set %v; want created with a secret", err, res, sec != "")
		}
	})

	t.Run("delete", func(t *testing.T) {
		if err := b.st.DeleteEndpoint(b.ctx, "", "other", store.Precondition{}); err != nil {
			t.Fatal(err)
		}
		if err := b.st.DeleteEndpoint(b.ctx, "", "other", store.Precondition{}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second delete = %v, want ErrNotFound", err)
		}
		if _, err := b.st.GetEndpoint(b.ctx, "other"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get deleted = %v, want ErrNotFound", err)
		}
	})
}

func TestEndpointValidation(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	tests := []struct {
		name   string
		mutate func(*store.PutEndpointParams)
		loc    string
	}{
		{"bad name", func(p *store.PutEndpointParams) { p.Name = "-x" }, "name"},
		{"no kinds", func(p *store.PutEndpointParams) { p.Kinds = nil }, "kinds"},
		{"bad kind", func(p *store.PutEndpointParams) { p.Kinds[0].Kind = "VPC" }, "kinds[0].kind"},
		{"version 0", func(p *store.PutEndpointParams) { p.Kinds[1].KindVersion = 0 }, "kinds[1].kind_version"},
		{"duplicate kind", func(p *store.PutEndpointParams) { p.Kinds[1] = p.Kinds[0] }, "kinds[1]"},
		{"unknown target type", func(p *store.PutEndpointParams) { p.Target.Type = "smtp" }, "target.type"},
		{"no url", func(p *store.PutEndpointParams) { p.Target.URL = "" }, "target.url"},
		{"ftp url", func(p *store.PutEndpointParams) { p.Target.URL = "ftp://x/y" }, "target.url"},
		{"credentials in url", func(p *store.PutEndpointParams) { p.Target.URL = "https://u:p@x/y" }, "target.url"},
		{"bad ca bundle", func(p *store.PutEndpointParams) { p.Target.CABundle = "not pem" }, "target.ca_bundle"},
		{"cert without key", func(p *store.PutEndpointParams) { p.Target.ClientCertFile = "/c.pem" }, "target.client_key_file"},
		{"bad health url", func(p *store.PutEndpointParams) { p.Health.URL = "nope" }, "health.url"},
		{"concurrency too high", func(p *store.PutEndpointParams) { p.MaxConcurrency = 1 << 20 }, "max_concurrency"},
		{"batch too large", func(p *store.PutEndpointParams) { p.MaxBatch = store.EndpointMaxBatchMax + 1 }, "max_batch"},
		{"negative batch", func(p *store.PutEndpointParams) { p.MaxBatch = -1 }, "max_batch"},
		{"negative timeout", func(p *store.PutEndpointParams) { p.RequestTimeoutSecs = -1 }, "request_timeout_secs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := endpointParams("v")
			tc.mutate(&p)
			_, _, err := b.st.CreateEndpoint(b.ctx, b.box, p)
			var ie *store.InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want *InvalidError", err)
			}
			if ie.Location != tc.loc {
				t.Errorf("location = %q, want %q (%s)", ie.Location, tc.loc, ie.Message)
			}
		})
	}
}

func TestEndpointSecretAtRest(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	_, secret, err := b.st.CreateEndpoint(b.ctx, b.box, endpointParams("a"))
	if err != nil {
		t.Fatal(err)
	}
	var enc []byte
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT secret_enc FROM endpoints WHERE name = 'a'`).Scan(&enc); err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret.Reveal(), "whsec_"))
	if bytes.Contains(enc, []byte(secret.Reveal())) || bytes.Contains(enc, raw) {
		t.Fatal("secret_enc holds the plaintext secret")
	}

	t.Run("the dispatcher opens it", func(t *testing.T) {
		eps, err := b.st.DispatchEndpoints(b.ctx, b.box)
		if err != nil {
			t.Fatal(err)
		}
		if len(eps) != 1 || eps[0].SecretErr != nil || len(eps[0].Secrets) != 1 || eps[0].Secrets[0].Secret != secret {
			t.Fatalf("dispatch endpoints = %+v, want the one secret", eps)
		}
	})

	t.Run("another key cannot", func(t *testing.T) {
		other, err := store.NewSecretBox(bytes.Repeat([]byte{7}, store.SecretKeyBytes))
		if err != nil {
			t.Fatal(err)
		}
		eps, err := b.st.DispatchEndpoints(b.ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(eps[0].SecretErr, store.ErrSecretUndecryptable) || len(eps[0].Secrets) != 0 {
			t.Fatalf("with the wrong key: %+v, want ErrSecretUndecryptable", eps[0])
		}
	})

	t.Run("a ciphertext moved to another row does not open", func(t *testing.T) {
		if _, _, err := b.st.CreateEndpoint(b.ctx, b.box, endpointParams("b")); err != nil {
			t.Fatal(err)
		}
		if _, err := b.db.Pool.Exec(b.ctx, `UPDATE endpoints SET secret_enc = (SELECT secret_enc FROM endpoints WHERE name = 'a') WHERE name = 'b'`); err != nil {
			t.Fatal(err)
		}
		eps, err := b.st.DispatchEndpoints(b.ctx, b.box)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range eps {
			if e.Name == "b" && !errors.Is(e.SecretErr, store.ErrSecretUndecryptable) {
				t.Fatalf("b opened a's ciphertext: %+v", e)
			}
		}
	})
}

func TestEndpointSecretRedaction(t *testing.T) {
	t.Parallel()
	s := store.EndpointSecret("whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0")
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "secret", s)
	js, _ := json.Marshal(struct{ S store.EndpointSecret }{s})
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %s %q %+v %#v", s, s, s, s, s), logged.String(), string(js)} {
		if strings.Contains(out, "c2VjcmV0") {
			t.Errorf("secret leaked: %s", out)
		}
	}
	if s.Reveal() != "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0" {
		t.Error("Reveal lost the secret")
	}
}

func TestEndpointSecretBox(t *testing.T) {
	t.Parallel()
	oldKey := bytes.Repeat([]byte{1}, store.SecretKeyBytes)
	newKey := bytes.Repeat([]byte{2}, store.SecretKeyBytes)
	oldBox, err := store.NewSecretBox(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := oldBox.Seal([]byte("plain"), []byte("row"))
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := store.NewSecretBox(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := rotated.Open(blob, []byte("row")); err != nil || string(pt) != "plain" {
		t.Fatalf("rotated box open = %q, %v; want the old key to still open", pt, err)
	}
	if _, err := rotated.Open(blob, []byte("other row")); !errors.Is(err, store.ErrSecretUndecryptable) {
		t.Fatalf("open with other aad = %v, want ErrSecretUndecryptable", err)
	}
	tampered := bytes.Clone(blob)
	tampered[len(tampered)-1] ^= 1
	if _, err := rotated.Open(tampered, []byte("row")); !errors.Is(err, store.ErrSecretUndecryptable) {
		t.Fatalf("open tampered = %v, want ErrSecretUndecryptable", err)
	}
	if _, err := store.NewSecretBox(make([]byte, 16)); err == nil {
		t.Error("a 16-byte key was accepted")
	}
	// SetKeys on the box in use: the new key seals, the old one opens; a
	// bad key set is refused and the keys stay.
	if err := oldBox.SetKeys(newKey, oldKey); err != nil {
		t.Fatal(err)
	}
	fresh, err := oldBox.Seal([]byte("plain"), []byte("row"))
	if err != nil {
		t.Fatal(err)
	}
	onlyNew, _ := store.NewSecretBox(newKey)
	if pt, err := onlyNew.Open(fresh, []byte("row")); err != nil || string(pt) != "plain" {
		t.Errorf("after SetKeys the box sealed with another key: %q, %v", pt, err)
	}
	if err := oldBox.SetKeys(newKey, make([]byte, 16)); err == nil {
		t.Error("SetKeys took a 16-byte key")
	}
	if _, err := oldBox.Open(blob, []byte("row")); err != nil {
		t.Errorf("after a refused SetKeys the old key no longer opens: %v", err)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
		k, err := store.ParseSecretKey(enc.EncodeToString(newKey))
		if err != nil || !bytes.Equal(k, newKey) {
			t.Errorf("ParseSecretKey = %v, %v", k, err)
		}
	}
	if _, err := store.ParseSecretKey(base64.StdEncoding.EncodeToString(make([]byte, 31))); err == nil {
		t.Error("a 31-byte key was accepted")
	}
}

func TestEndpointRotateSecret(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	_, first, err := b.st.CreateEndpoint(b.ctx, b.box, endpointParams("a"))
	if err != nil {
		t.Fatal(err)
	}
	second, ends, err := b.st.RotateEndpointSecret(b.ctx, b.box, "a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("rotation kept the secret")
	}
	if d := time.Until(ends); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("rotation ends in %s, want ~1h", d)
	}
	eps, err := b.st.DispatchEndpoints(b.ctx, b.box)
	if err != nil {
		t.Fatal(err)
	}
	got := eps[0].Secrets
	if len(got) != 2 || got[0].Secret != second || !got[0].Until.IsZero() || got[1].Secret != first || !got[1].Until.Equal(ends) {
		t.Fatalf("secrets during the grace window = %+v; want the new one then the old one until %s", got, ends)
	}
	if e, _ := b.st.GetEndpoint(b.ctx, "a"); e.SecretRotationEndsAt == nil || !e.SecretRotationEndsAt.Equal(ends) {
		t.Errorf("endpoint rotation end = %v, want %s", e.SecretRotationEndsAt, ends)
	}

	// Past the window only the new secret signs.
	if _, err := b.db.Pool.Exec(b.ctx, `UPDATE endpoints SET prev_secret_expires = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	eps, err = b.st.DispatchEndpoints(b.ctx, b.box)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps[0].Secrets) != 1 || eps[0].Secrets[0].Secret != second {
		t.Fatalf("secrets after the window = %+v, want only the new one", eps[0].Secrets)
	}
	if e, _ := b.st.GetEndpoint(b.ctx, "a"); e.SecretRotationEndsAt != nil {
		t.Errorf("rotation end after the window = %v, want nil", e.SecretRotationEndsAt)
	}
	if _, _, err := b.st.RotateEndpointSecret(b.ctx, b.box, "missing", 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("rotate missing = %v, want ErrNotFound", err)
	}
}

func TestEndpointDisable(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	if _, _, err := b.st.CreateEndpoint(b.ctx, b.box, endpointParams("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.st.DisableEndpoint(b.ctx, "a", "target answered 410 Gone"); err != nil {
		t.Fatal(err)
	}
	e, _ := b.st.GetEndpoint(b.ctx, "a")
	if e.Enabled || e.DisabledReason != "target answered 410 Gone" {
		t.Fatalf("after disable: enabled=%v reason=%q", e.Enabled, e.DisabledReason)
	}
	if err := b.st.DisableEndpoint(b.ctx, "a", "target answered 410 Gone"); err != nil {
		t.Fatalf("disable again: %v", err)
	}
	// Re-applying the declared (enabled) endpoint turns it back on.
	e, res, _, err := b.st.PutEndpoint(b.ctx, b.box, endpointParams("a"))
	if err != nil || res != store.ApplyConfigured || !e.Enabled || e.DisabledReason != "" {
		t.Fatalf("re-apply = %+v, %q, %v; want enabled again", e, res, err)
	}
	if err := b.st.DisableEndpoint(b.ctx, "missing", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("disable missing = %v, want ErrNotFound", err)
	}
}

func lambdaParams(name string, target store.EndpointTarget) store.PutEndpointParams {
	return store.PutEndpointParams{Name: name, Kinds: []store.EndpointKind{{Kind: "vpc", KindVersion: 1}}, Target: target}
}

// TestEndpointLambdaValidation: the Lambda target types are checked field by
// field, each problem naming its field, and their defaults are stored.
func TestEndpointLambdaValidation(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	const arn = "arn:aws:lambda:eu-west-1:123456789012:function:vpc-provider"
	fn := store.EndpointTarget{Type: store.TargetLambda, Function: "vpc-provider", Region: "eu-west-1"}
	furl := store.EndpointTarget{Type: store.TargetLambdaURL, URL: "https://abcdef123.lambda-url.eu-west-1.on.aws/"}
	tests := []struct {
		name   string
		target store.EndpointTarget
		health store.EndpointHealth
		loc    string
	}{
		{"no function", store.EndpointTarget{Type: store.TargetLambda, Region: "eu-west-1"}, store.EndpointHealth{}, "target.function"},
		{"bad function", with(fn, func(t *store.EndpointTarget) { t.Function = "a b" }), store.EndpointHealth{}, "target.function"},
		{"name without region", with(fn, func(t *store.EndpointTarget) { t.Region = "" }), store.EndpointHealth{}, "target.region"},
		{"bad region", with(fn, func(t *store.EndpointTarget) { t.Region = "Europe" }), store.EndpointHealth{}, "target.region"},
		{"region against arn", with(fn, func(t *store.EndpointTarget) { t.Function = arn; t.Region = "us-east-1" }), store.EndpointHealth{}, "target.region"},
		{"bad invocation", with(fn, func(t *store.EndpointTarget) { t.Invocation = "later" }), store.EndpointHealth{}, "target.invocation"},
		{"bad qualifier", with(fn, func(t *store.EndpointTarget) { t.Qualifier = "v 1" }), store.EndpointHealth{}, "target.qualifier"},
		{"bad role", with(fn, func(t *store.EndpointTarget) { t.RoleARN = "admin" }), store.EndpointHealth{}, "target.role_arn"},
		{"bad endpoint url", with(fn, func(t *store.EndpointTarget) { t.EndpointURL = "lambda" }), store.EndpointHealth{}, "target.endpoint_url"},
		{"url on lambda", with(fn, func(t *store.EndpointTarget) { t.URL = "https://x.example/" }), store.EndpointHealth{}, "target.url"},
		{"auth on lambda", with(fn, func(t *store.EndpointTarget) { t.Auth = "none" }), store.EndpointHealth{}, "target.auth"},
		{"health url on lambda", fn, store.EndpointHealth{URL: "https://x.example/"}, "health.url"},
		{"bad health type", fn, store.EndpointHealth{Type: "ping"}, "health.type"},
		{"invoke on https", store.EndpointTarget{Type: store.TargetHTTPS, URL: "https://x.example/"}, store.EndpointHealth{Type: "invoke"}, "health.type"},
		{"region on https", store.EndpointTarget{Type: store.TargetHTTPS, URL: "https://x.example/", Region: "eu-west-1"}, store.EndpointHealth{}, "target.region"},
		{"no url", with(furl, func(t *store.EndpointTarget) { t.URL = "" }), store.EndpointHealth{}, "target.url"},
		{"not a function url", with(furl, func(t *store.EndpointTarget) { t.URL = "https://x.example/" }), store.EndpointHealth{}, "target.url"},
		{"plain http function url", with(furl, func(t *store.EndpointTarget) { t.URL = "http://abcdef123.lambda-url.eu-west-1.on.aws/" }), store.EndpointHealth{}, "target.url"},
		{"region against url", with(furl, func(t *store.EndpointTarget) { t.Region = "us-east-1" }), store.EndpointHealth{}, "target.region"},
		{"custom url without region", with(furl, func(t *store.EndpointTarget) { t.URL = "http://127.0.0.1:9000/" }), store.EndpointHealth{}, "target.region"},
		{"bad auth", with(furl, func(t *store.EndpointTarget) { t.Auth = "iam" }), store.EndpointHealth{}, "target.auth"},
		{"role without iam", with(furl, func(t *store.EndpointTarget) { t.Auth = "none"; t.RoleARN = "arn:aws:iam::123456789012:role/r" }), store.EndpointHealth{}, "target.role_arn"},
		{"function on url", with(furl, func(t *store.EndpointTarget) { t.Function = "f" }), store.EndpointHealth{}, "target.function"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := lambdaParams("l", tc.target)
			p.Health = tc.health
			_, _, err := b.st.CreateEndpoint(b.ctx, b.box, p)
			var ie *store.InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want *InvalidError", err)
			}
			if ie.Location != tc.loc {
				t.Errorf("location = %q, want %q (%s)", ie.Location, tc.loc, ie.Message)
			}
		})
	}

	// Defaults are stored: sync, the ARN's region, the URL's region, aws_iam.
	e, _, err := b.st.CreateEndpoint(b.ctx, b.box, lambdaParams("by-arn", store.EndpointTarget{Type: store.TargetLambda, Function: arn}))
	if err != nil {
		t.Fatal(err)
	}
	if e.Target.Region != "eu-west-1" || e.Target.Invocation != store.InvocationSync {
		t.Errorf("lambda target = %+v, want region eu-west-1, invocation sync", e.Target)
	}
	e, _, err = b.st.CreateEndpoint(b.ctx, b.box, lambdaParams("by-url", furl))
	if err != nil {
		t.Fatal(err)
	}
	if e.Target.Region != "eu-west-1" || e.Target.Auth != store.AuthAWSIAM {
		t.Errorf("lambda_url target = %+v, want region eu-west-1, auth aws_iam", e.Target)
	}
	// Re-applying the same document without the defaults changes nothing.
	_, res, _, err := b.st.PutEndpoint(b.ctx, b.box, lambdaParams("by-url", furl))
	if err != nil || res != store.ApplyUnchanged {
		t.Errorf("re-apply = %v, %v; want unchanged", res, err)
	}
}

func with(t store.EndpointTarget, f func(*store.EndpointTarget)) store.EndpointTarget {
	f(&t)
	return t
}
