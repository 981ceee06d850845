package store_test

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/control/store"
)

// TestResealSecrets: rows sealed under key A (endpoint secrets, a previous
// secret in its grace window, a sealed idempotency answer) survive two
// rotations, A to B to C, when each rotation re-seals what the key it
// retires sealed: a box holding C alone opens everything. Without the
// re-seal, the box of the second rotation (C, B) opens none of them.
func TestResealSecrets(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	newKey := func() []byte {
		k := make([]byte, store.SecretKeyBytes)
		if _, err := rand.Read(k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	mustBox := func(key []byte, previous ...[]byte) *store.SecretBox {
		box, err := store.NewSecretBox(key, previous...)
		if err != nil {
			t.Fatal(err)
		}
		return box
	}
	keyA, keyB, keyC := newKey(), newKey(), newKey()
	boxA := mustBox(keyA)

	const endpoints = store.ResealBatchDefault + 3 // more than one batch
	for i := range endpoints {
		if _, _, err := b.st.CreateEndpoint(b.ctx, boxA, endpointParams(fmtName(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := b.st.RotateEndpointSecret(b.ctx, boxA, fmtName(0), time.Hour); err != nil {
		t.Fatal(err)
	}
	idem := store.IdempotencyParams{Caller: []byte("caller"), Key: "k1", Request: []byte("req"), Lease: time.Minute, Retention: time.Hour, Box: boxA}
	took, err := b.st.IdempotencyTake(b.ctx, idem)
	if err != nil {
		t.Fatal(err)
	}
	answer := store.IdempotentAnswer{Status: 201, Headers: map[string]string{}, Body: []byte(`{"secret":"whsec_x"}`)}
	if err := b.st.IdempotencyFinish(b.ctx, idem, took.Owner, answer); err != nil {
		t.Fatal(err)
	}
	want := secretsOf(t, b, boxA)
	if len(want) != endpoints || len(want[fmtName(0)]) != 2 {
		t.Fatalf("before: %d endpoints, %d secrets on the rotated one", len(want), len(want[fmtName(0)]))
	}

	t.Run("without a re-seal", func(t *testing.T) {
		for _, d := range dispatchEndpoints(t, b, mustBox(keyC, keyB)) {
			if !errors.Is(d.SecretErr, store.ErrSecretUndecryptable) {
				t.Fatalf("%s: opened by (C, B): %v", d.Name, d.SecretErr)
			}
		}
	})

	versions := func(box *store.SecretBox) map[string]int64 {
		t.Helper()
		out := map[string]int64{}
		for _, d := range dispatchEndpoints(t, b, box) {
			out[d.Name] = d.ResourceVersion
		}
		return out
	}
	wantVersions := versions(boxA)

	// Rotation 1: B seals, A still opens; re-seal what A sealed.
	boxB := mustBox(keyB, keyA)
	n, err := b.st.ResealSecrets(b.ctx, boxB, keyA)
	if err != nil || n != endpoints+1 {
		t.Fatalf("reseal A: %d rows, %v; want %d", n, err, endpoints+1)
	}
	if n, err := b.st.ResealSecrets(b.ctx, boxB, keyA); err != nil || n != 0 {
		t.Fatalf("reseal A again: %d rows, %v; want 0", n, err)
	}
	// Rotation 2: C seals, B opens, A is gone.
	boxC := mustBox(keyC, keyB)
	if n, err := b.st.ResealSecrets(b.ctx, boxC, keyB); err != nil || n != endpoints+1 {
		t.Fatalf("reseal B: %d rows, %v; want %d", n, err, endpoints+1)
	}

	onlyC := mustBox(keyC)
	if diff := cmp.Diff(want, secretsOf(t, b, onlyC)); diff != "" {
		t.Errorf("secrets after two rotations (-want +got):\n%s", diff)
	}
	// A re-seal is no write of the user's: If-Match versions still hold.
	if diff := cmp.Diff(wantVersions, versions(onlyC)); diff != "" {
		t.Errorf("resource versions after two re-seals (-want +got):\n%s", diff)
	}
	idem.Box = onlyC
	got, err := b.st.IdempotencyTake(b.ctx, idem)
	if err != nil || got.State != store.IdempotencyAnswered || string(got.Answer.Body) != string(answer.Body) {
		t.Errorf("idempotency answer after two rotations: %+v, %v", got, err)
	}

	t.Run("a row no key opens", func(t *testing.T) {
		if _, err := b.st.ResealSecrets(b.ctx, mustBox(newKey(), keyB), keyC); !errors.Is(err, store.ErrSecretUndecryptable) {
			t.Errorf("reseal with a box lacking the rows' key: err = %v, want ErrSecretUndecryptable", err)
		}
	})
}

func fmtName(i int) string { return "ep-" + string(rune('a'+i/26%26)) + string(rune('a'+i%26)) }

func dispatchEndpoints(t *testing.T, b *endpointBundle, box *store.SecretBox) []store.DispatchEndpoint {
	t.Helper()
	ds, err := b.st.DispatchEndpoints(b.ctx, box)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// secretsOf opens every endpoint's signing secrets with box.
func secretsOf(t *testing.T, b *endpointBundle, box *store.SecretBox) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, d := range dispatchEndpoints(t, b, box) {
		if d.SecretErr != nil {
			t.Fatalf("%s: %v", d.Name, d.SecretErr)
		}
		for _, s := range d.Secrets {
			out[d.Name] = append(out[d.Name], s.Secret.Reveal())
		}
	}
	return out
}
