package cli

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/callback"
	"github.com/convergeplane/converge/internal/keyrotation"
	krt "github.com/convergeplane/converge/internal/keyrotation/keyrotationtest"
	"github.com/convergeplane/converge/internal/testkit/awstest"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestKeyRotation rotates both keys twice with the rotation function
// against moto_server while a pod's key refresher re-reads them, step by
// step, as the pods do every KEY_REFRESH_INTERVAL:
//   - once the new key is pending the pod verifies tokens and opens rows of
//     it, but still mints and seals with the old one;
//   - once it is current the pod mints and seals with it, still accepts
//     the old one, and has re-sealed the rows the old key sealed;
//   - fetchKeys, as a pod starting then, reads current and previous;
//   - after the second rotation an endpoint created under the first key
//     opens with the third alone: nothing was lost.
func TestKeyRotation(t *testing.T) {
	ctx := t.Context()
	k := newRotatingKeys(t)
	sm, rotator, secretARN, callbackARN, secretA, callbackA := k.sm, k.rotator, k.secretARN, k.callbackARN, k.secretA, k.callbackA

	cfg := Config{SecretKeyARN: secretARN, CallbackKeyARN: callbackARN}
	src, err := cfg.fetchKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cfg.SecretKey, secretA) || !bytes.Equal(cfg.CallbackKey, callbackA) || cfg.PreviousSecretKeys != nil || cfg.PreviousCallbackKeys != nil {
		t.Fatalf("before a rotation: keys %x, %x, previous %x, %x", cfg.SecretKey, cfg.CallbackKey, cfg.PreviousSecretKeys, cfg.PreviousCallbackKeys)
	}

	// The pod: a box, the dispatcher's tokens, a control pod's store.
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})
	box, err := store.NewSecretBox(cfg.SecretKey, cfg.PreviousSecretKeys...)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := callback.NewTokens(cfg.CallbackKey, cfg.PreviousCallbackKeys...)
	if err != nil {
		t.Fatal(err)
	}
	r := &keyRefresher{src: src, interval: time.Minute, box: box, setTokenKeys: tokens.SetKeys, store: st,
		errors: newKeyRefreshErrors(), log: slog.New(slog.NewTextHandler(io.Discard, nil)), last: src.initial}
	_, endpointSecret, err := st.CreateEndpoint(ctx, box, store.PutEndpointParams{Name: "net", Kinds: []store.EndpointKind{{Kind: "vpc", KindVersion: 1}},
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "https://net.example.com/converge"}})
	if err != nil {
		t.Fatal(err)
	}
	claim := callback.Claim{TaskID: "0195a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Expires: time.Now().Add(time.Hour)}
	tokenA, err := tokens.Mint(claim)
	if err != nil {
		t.Fatal(err)
	}

	// sealedWith reports whether the endpoint's stored secret opens with
	// key alone.
	sealedWith := func(key []byte) bool {
		t.Helper()
		only, err := store.NewSecretBox(key)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := st.DispatchEndpoints(ctx, only)
		if err != nil || len(ds) != 1 {
			t.Fatalf("dispatch endpoints: %v, %v", ds, err)
		}
		if ds[0].SecretErr != nil {
			return false
		}
		if got := ds[0].Secrets[0].Secret.Reveal(); got != endpointSecret.Reveal() {
			t.Fatalf("the endpoint's secret changed: %q", got)
		}
		return true
	}
	// mintedWith reports whether the pod's tokens mint with key.
	mintedWith := func(key []byte) bool {
		t.Helper()
		tok, err := tokens.Mint(claim)
		if err != nil {
			t.Fatal(err)
		}
		only, _ := callback.NewTokens(key)
		_, err = only.Verify(tok, time.Now())
		return err == nil
	}
	decode := func(stage, arn string) []byte {
		t.Helper()
		k, err := base64.StdEncoding.DecodeString(krt.Value(ctx, t, sm, arn, stage))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}

	keysSecret, keysCallback := [][]byte{secretA}, [][]byte{callbackA}
	for rotation := 1; rotation <= 2; rotation++ {
		tokSecret, tokCallback := krt.Start(ctx, t, sm, secretARN), krt.Start(ctx, t, sm, callbackARN)
		r.refresh(ctx) // the new versions are staged, still without a value
		krt.Step(ctx, t, rotator, secretARN, tokSecret, "createSecret")
		krt.Step(ctx, t, rotator, callbackARN, tokCallback, "createSecret")
		r.refresh(ctx)
		newSecret, newCallback := decode(keyrotation.StagePending, secretARN), decode(keyrotation.StagePending, callbackARN)
		oldSecret, oldCallback := keysSecret[len(keysSecret)-1], keysCallback[len(keysCallback)-1]

		// Pending: the new keys are accepted, the old ones still used.
		blob, err := mustBox(t, newSecret).Seal([]byte("x"), []byte("aad"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := box.Open(blob, []byte("aad")); err != nil {
			t.Errorf("rotation %d, pending: a row sealed with the new key does not open: %v", rotation, err)
		}
		newOnly, _ := callback.NewTokens(newCallback)
		tokNew, _ := newOnly.Mint(claim)
		if _, err := tokens.Verify(tokNew, time.Now()); err != nil {
			t.Errorf("rotation %d, pending: a token of the new key is refused: %v", rotation, err)
		}
		if !mintedWith(oldCallback) || !sealedWith(oldSecret) {
			t.Errorf("rotation %d, pending: the pod already mints or seals with the new key", rotation)
		}

		for _, step := range krt.Steps[1:] {
			krt.Step(ctx, t, rotator, secretARN, tokSecret, step)
			krt.Step(ctx, t, rotator, callbackARN, tokCallback, step)
		}
		r.refresh(ctx)
		// Current: the new keys are used, the old ones still accepted, and
		// the endpoint re-sealed under the new key.
		if !mintedWith(newCallback) {
			t.Errorf("rotation %d: the pod does not mint with the new key", rotation)
		}
		oldOnly, _ := callback.NewTokens(oldCallback)
		tokOld, _ := oldOnly.Mint(claim)
		if _, err := tokens.Verify(tokOld, time.Now()); err != nil {
			t.Errorf("rotation %d: a token of the previous key is refused: %v", rotation, err)
		}
		if !sealedWith(newSecret) {
			t.Errorf("rotation %d: the endpoint was not re-sealed under the new key", rotation)
		}

		// A pod starting now reads current and previous.
		c := Config{SecretKeyARN: secretARN, CallbackKeyARN: callbackARN}
		if _, err := c.fetchKeys(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c.SecretKey, newSecret) || len(c.PreviousSecretKeys) != 1 || !bytes.Equal(c.PreviousSecretKeys[0], oldSecret) ||
			!bytes.Equal(c.CallbackKey, newCallback) || len(c.PreviousCallbackKeys) != 1 || !bytes.Equal(c.PreviousCallbackKeys[0], oldCallback) {
			t.Errorf("rotation %d: fetchKeys read %x (previous %x), %x (previous %x)", rotation, c.SecretKey, c.PreviousSecretKeys, c.CallbackKey, c.PreviousCallbackKeys)
		}
		keysSecret, keysCallback = append(keysSecret, newSecret), append(keysCallback, newCallback)
	}

	if n := testutil.ToFloat64(r.errors); n != 0 {
		t.Errorf("%v refresh errors in two rotations", n)
	}
	// A re-read that fails counts, and keeps the keys in use.
	r.src.secret.arn = "converge/deleted"
	r.refresh(ctx)
	if n := testutil.ToFloat64(r.errors); n != 1 {
		t.Errorf("converge_key_refresh_errors_total = %v after a failed re-read, want 1", n)
	}
	if !sealedWith(keysSecret[2]) || !mintedWith(keysCallback[2]) {
		t.Error("a failed re-read changed the keys in use")
	}

	// Two rotations on, the first keys are gone: their token is refused,
	// and nothing needs the first secret key.
	if _, err := tokens.Verify(tokenA, time.Now()); !errors.Is(err, callback.ErrBadToken) {
		t.Errorf("a token of the key two rotations ago: %v, want ErrBadToken", err)
	}
	if !sealedWith(keysSecret[2]) {
		t.Error("the endpoint created under the first key does not open with the third alone")
	}
}

func mustBox(t *testing.T, key []byte) *store.SecretBox {
	t.Helper()
	b, err := store.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestKeyRotationOnAServer: a running server (ROLE=all) with both keys by
// ARN takes up two rotations of each with no restart, over HTTP: after
// each, a callback token of the new key is accepted and one of the key
// before it still is, and the endpoint registered under the first key has
// been re-sealed under the new one; after the second, a token of the first
// key is refused.
func TestKeyRotationOnAServer(t *testing.T) {
	ctx := t.Context()
	k := newRotatingKeys(t)
	sm, rotator, secretARN, callbackARN, callbackA := k.sm, k.rotator, k.secretARN, k.callbackARN, k.callbackA

	db := pgtest.New(t)
	cfg, err := LoadConfig(env(map[string]string{"DATABASE_URL": db.DSN, "LISTEN_ADDR": "127.0.0.1:0", "HEALTH_ADDR": "127.0.0.1:0",
		"CONVERGE_SECRET_KEY_SECRET_ARN": secretARN, "CONVERGE_CALLBACK_KEY_SECRET_ARN": callbackARN, "KEY_REFRESH_INTERVAL": "50ms"}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dev = true // a loopback endpoint
	srv, err := Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	base := "http://" + srv.Addr()
	req := func(method, path, token, body string) int {
		t.Helper()
		r, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := req("POST", "/api/v1/endpoints", "", `{"name":"net","kinds":[{"kind":"vpc","kind_version":1}],"target":{"type":"https","url":"http://127.0.0.1:9/hook"}}`); code != http.StatusCreated {
		t.Fatalf("register an endpoint: %d", code)
	}
	const taskID = "0195a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	tokenOf := func(key []byte) string {
		tk, err := callback.NewTokens(key)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := tk.Mint(callback.Claim{TaskID: taskID, Expires: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	// accepted: the callback route takes the token (the task is unknown,
	// which answers something other than 401).
	accepted := func(key []byte) bool {
		return req("GET", "/v1/tasks/"+taskID, tokenOf(key), "") != http.StatusUnauthorized
	}
	st := store.New(db.Pool, store.Config{})
	opensWith := func(key []byte) bool {
		ds, err := st.DispatchEndpoints(ctx, mustBox(t, key))
		if err != nil || len(ds) != 1 {
			t.Fatalf("dispatch endpoints: %v, %v", ds, err)
		}
		return ds[0].SecretErr == nil
	}
	if !accepted(callbackA) {
		t.Fatal("a token of the callback key is refused before any rotation")
	}

	callbackKeys := [][]byte{callbackA}
	for rotation := 1; rotation <= 2; rotation++ {
		for _, arn := range []string{secretARN, callbackARN} {
			token := krt.Start(ctx, t, sm, arn)
			for _, step := range krt.Steps {
				krt.Step(ctx, t, rotator, arn, token, step)
			}
		}
		newSecret := decodeKey(t, krt.Value(ctx, t, sm, secretARN, keyrotation.StageCurrent))
		newCallback := decodeKey(t, krt.Value(ctx, t, sm, callbackARN, keyrotation.StageCurrent))
		// Taken up: the new keys work, and the key two rotations back,
		// which no stage holds any more, is refused.
		takenUp := func() bool {
			return accepted(newCallback) && opensWith(newSecret) && (rotation < 2 || !accepted(callbackKeys[rotation-2]))
		}
		deadline := time.Now().Add(30 * time.Second)
		for !takenUp() {
			if time.Now().After(deadline) {
				t.Fatalf("rotation %d: not taken up within 30s: new token accepted %v, endpoint re-sealed %v, oldest token accepted %v",
					rotation, accepted(newCallback), opensWith(newSecret), accepted(callbackA))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if prev := callbackKeys[rotation-1]; !accepted(prev) {
			t.Errorf("rotation %d: a token of the previous key is refused", rotation)
		}
		callbackKeys = append(callbackKeys, newCallback)
	}
	resp, err := http.Get(base + "/metrics") //nolint:noctx // a test's short request
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// Exposed; not necessarily 0: moto_server's RotateSecret, until
	// krt.Start puts the stages back, makes the empty version AWSCURRENT,
	// which a re-read at that moment cannot read.
	if !strings.Contains(string(metrics), "\nconverge_key_refresh_errors_total ") {
		t.Errorf("/metrics has no converge_key_refresh_errors_total:\n%s", metrics)
	}
}

func decodeKey(t *testing.T, s string) []byte {
	t.Helper()
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// rotatingKeys are the two keys in Secrets Manager (a moto_server the
// helper starts), first values A, and a rotation function for both.
type rotatingKeys struct {
	sm                     *secretsmanager.Client
	rotator                *keyrotation.Rotator
	secretARN, callbackARN string
	secretA, callbackA     []byte
}

func newRotatingKeys(t *testing.T) rotatingKeys {
	t.Helper()
	awstest.Start(t)
	awsCfg, err := loadAWS(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	k := rotatingKeys{sm: secretsmanager.NewFromConfig(awsCfg)}
	create := func(name string, n int) (string, []byte) {
		key := bytes.Repeat([]byte{byte(n)}, n)
		out, err := k.sm.CreateSecret(t.Context(), &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(base64.StdEncoding.EncodeToString(key))})
		if err != nil {
			t.Fatal(err)
		}
		return *out.ARN, key
	}
	k.secretARN, k.secretA = create("converge/secret-key", keyrotation.SecretKeyBytes)
	k.callbackARN, k.callbackA = create("converge/callback-key", keyrotation.CallbackKeyBytes)
	k.rotator = keyrotation.New(k.sm, keyrotation.Config{KeyBytes: map[string]int{k.secretARN: keyrotation.SecretKeyBytes, k.callbackARN: keyrotation.CallbackKeyBytes},
		Propagation: -1, MinKeyAge: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return k
}
