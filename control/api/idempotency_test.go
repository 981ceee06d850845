package api_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/api"
)

// key is a fresh Idempotency-Key header.
func key(t *testing.T) string {
	t.Helper()
	return "Idempotency-Key: " + rand.Text()
}

// TestIdempotencyKeys is the contract of Idempotency-Key on a POST: a retry
// repeats the first answer without running again; another request under
// the key is 422; a refusal keeps nothing.
func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.putManifest("widget", widgetKind).wantApply(t, "created")
	const body = `{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"a"}}`
	applied := func() int {
		return b.count(`SELECT count(*) FROM resource_events WHERE type = 'applied'`)
	}

	t.Run("a retry repeats the first answer and runs nothing", func(t *testing.T) {
		k := key(t)
		first := b.do(http.MethodPost, "/api/v1/resources", body, k).wantApply(t, "created")
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Fatal("the first answer says it is a replay")
		}
		events := applied()
		again := b.do(http.MethodPost, "/api/v1/resources", body, k).wantApply(t, "created")
		if again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) ||
			again.header.Get("ETag") != first.header.Get("ETag") || again.header.Get("Content-Type") != first.header.Get("Content-Type") {
			t.Fatalf("replay: %d %v %s, want the first answer (%s) marked replayed", again.status, again.header, again.body, first.body)
		}
		if n := applied(); n != events {
			t.Fatalf("the retry ran: %d more applied events", n-events)
		}
		// Without the key, the same POST runs (and finds nothing to do).
		b.do(http.MethodPost, "/api/v1/resources", body).wantApply(t, "unchanged")
	})

	t.Run("the same key with another request is 422", func(t *testing.T) {
		k := key(t)
		b.do(http.MethodPost, "/api/v1/resources", body, k).want(t, http.StatusOK)
		p := b.do(http.MethodPost, "/api/v1/resources", strings.Replace(body, `"a"`, `"b"`, 1), k).
			wantProblem(t, http.StatusUnprocessableEntity, "header.Idempotency-Key")
		if p.Type != "urn:converge:problem:idempotency-key-reused" {
			t.Fatalf("type %q", p.Type)
		}
		b.do(http.MethodPost, "/api/v1/resources/widget/w/reconcile", nil, k).wantProblem(t, http.StatusUnprocessableEntity, "header.Idempotency-Key")
		if img := b.do(http.MethodGet, "/api/v1/resources/widget/w", nil).object(t)["spec"].(map[string]any)["image"]; img != "a" {
			t.Fatalf("the refused request wrote: image %v", img)
		}
	})

	t.Run("a refusal keeps nothing: the corrected request runs", func(t *testing.T) {
		k := key(t)
		b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"v","spec":{"replicas":99}}`, k).
			wantProblem(t, http.StatusBadRequest, "")
		b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"v","spec":{"image":"x"}}`, k).
			wantApply(t, "created")
	})

	t.Run("an operator verb runs once", func(t *testing.T) {
		k := key(t)
		asked := func() int {
			return b.count(`SELECT count(*) FROM resource_events WHERE type = 'reconcile_requested'`)
		}
		before := asked()
		first := b.do(http.MethodPost, "/api/v1/resources/widget/w/reconcile", nil, k)
		if first.status/100 != 2 {
			t.Fatalf("reconcile: %d %s", first.status, first.body)
		}
		b.do(http.MethodPost, "/api/v1/resources/widget/w/reconcile", nil, k).want(t, first.status)
		if n := asked() - before; n != 1 {
			t.Fatalf("two reconciles under one key logged %d requests, want 1", n)
		}
	})

	t.Run("malformed keys", func(t *testing.T) {
		for _, k := range []string{"Idempotency-Key: " + strings.Repeat("k", api.MaxIdempotencyKeyBytes+1), "Idempotency-Key: a b"} {
			b.do(http.MethodPost, "/api/v1/resources", body, k).wantProblem(t, http.StatusBadRequest, "header.Idempotency-Key")
		}
	})

	t.Run("an expired key runs again", func(t *testing.T) {
		k := key(t)
		b.do(http.MethodPost, "/api/v1/resources/widget/w/reconcile", nil, k).want(t, http.StatusAccepted)
		b.exec(`UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = $1`, strings.TrimPrefix(k, "Idempotency-Key: "))
		if r := b.do(http.MethodPost, "/api/v1/resources/widget/w/reconcile", nil, k).want(t, http.StatusAccepted); r.header.Get("Idempotent-Replayed") != "" {
			t.Fatal("an expired key was replayed")
		}
	})

	t.Run("a first request that never answered makes the outcome unknown", func(t *testing.T) {
		k := key(t)
		b.do(http.MethodPost, "/api/v1/resources/widget/w/reconcile", nil, k).want(t, http.StatusAccepted)
		// As its process would leave it, stopped mid-request: owned, its
		// lease run out, no answer.
		b.exec(`UPDATE idempotency_keys SET owner = gen_random_uuid(), status = NULL, headers = NULL, body = NULL,
			lease_until = now() - interval '1 second' WHERE key = $1`, strings.TrimPrefix(k, "Idempotency-Key: "))
		p := b.do(http.MethodPost, "/api/v1/resources/widget/w/reconcile", nil, k).wantProblem(t, http.StatusConflict, "header.Idempotency-Key")
		if p.Type != "urn:converge:problem:idempotency-outcome-unknown" {
			t.Fatalf("type %q", p.Type)
		}
	})
}

// TestIdempotencyDuplicatesRace: duplicates sent at once while the first is
// still running are resolved by the database: one runs, the others wait
// and repeat its answer.
func TestIdempotencyDuplicatesRace(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.putManifest("widget", widgetKind).wantApply(t, "created")
	b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"a"}}`).wantApply(t, "created")
	events := b.count(`SELECT count(*) FROM resource_events WHERE type = 'applied'`)

	// Hold the resource's row so the request that takes the key blocks in
	// its write, holding the key, while its duplicates arrive.
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := tx.Exec(ctx, `SELECT 1 FROM resources WHERE name = 'w' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	k := key(t)
	const n = 4
	answers := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i] = b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"b"}}`, k)
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.count(`SELECT count(*) FROM idempotency_keys WHERE owner IS NOT NULL`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no request took the key")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	ran := 0
	for i, a := range answers {
		a.wantApply(t, "configured")
		if a.header.Get("Idempotent-Replayed") == "" {
			ran++
		}
		if string(a.body) != string(answers[0].body) {
			t.Fatalf("answer %d differs: %s vs %s", i, a.body, answers[0].body)
		}
	}
	if ran != 1 {
		t.Fatalf("%d of %d duplicates ran, want 1", ran, n)
	}
	if got := b.count(`SELECT count(*) FROM resource_events WHERE type = 'applied'`) - events; got != 1 {
		t.Fatalf("%d applies logged, want 1", got)
	}
}

// TestIdempotencyPerCaller: two callers' keys never meet, and a kept
// answer that shows a signing secret is stored encrypted.
func TestIdempotencyPerCaller(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{AdminTokens: []string{"admin-token-one-xx", "admin-token-two-xx"},
		Endpoints: endpointsConfig(t)})
	one, two := "Authorization: Bearer admin-token-one-xx", "Authorization: Bearer admin-token-two-xx"
	b.do(http.MethodPut, "/api/v1/kinds/vpc/manifest", fixture(t, "vpc.kind.json"), one).wantApply(t, "created")
	b.do(http.MethodPost, "/api/v1/endpoints", `{"name":"ep","kinds":[{"kind":"vpc","kind_version":1}],"target":{"type":"https","url":"https://p.example/"}}`, one).
		wantApply(t, "created")

	k := key(t)
	var first, second, third struct {
		Secret string `json:"secret"`
	}
	b.do(http.MethodPost, "/api/v1/endpoints/ep/rotate-secret", nil, one, k).want(t, http.StatusOK).decode(t, &first)
	b.do(http.MethodPost, "/api/v1/endpoints/ep/rotate-secret", nil, one, k).want(t, http.StatusOK).decode(t, &second)
	b.do(http.MethodPost, "/api/v1/endpoints/ep/rotate-secret", nil, two, k).want(t, http.StatusOK).decode(t, &third)
	if first.Secret == "" || second.Secret != first.Secret {
		t.Fatalf("a retry rotated again: %q then %q", first.Secret, second.Secret)
	}
	if third.Secret == first.Secret {
		t.Fatal("another caller's request under the same key was answered with the first caller's answer")
	}
	if n := b.count(`SELECT count(*) FROM idempotency_keys WHERE NOT sealed OR position(convert_to($1, 'UTF8') in body) > 0`, first.Secret); n != 0 {
		t.Fatalf("%d kept answers hold a signing secret in the clear", n)
	}
}
