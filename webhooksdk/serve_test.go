package webhooksdk_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/internal/testkit/testnet"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// served is one Serve running in the background on a loopback listener.
type served struct {
	url    string
	client *http.Client
	done   chan error // Serve's return
}

// startServe runs Serve(ctx, a loopback listener, providers, the test's secret and
// logger, opts...) until the test ends.
func startServe(t *testing.T, ctx context.Context, providers []webhooksdk.Provider, opts ...webhooksdk.Option) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &served{url: "http://" + ln.Addr().String() + "/", client: &http.Client{}, done: make(chan error, 1)}
	base := []webhooksdk.Option{
		webhooksdk.WithSecrets(vectorSecret),
		webhooksdk.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))),
		webhooksdk.WithCallbackRetry(5*time.Millisecond, 20*time.Millisecond, time.Minute),
	}
	go func() { s.done <- webhooksdk.Serve(ctx, ln, providers, append(base, opts...)...) }()
	t.Cleanup(func() {
		cancel()
		_ = s.wait(t) // what it returned is the test's to check
	})
	return s
}

// wait returns what Serve returned, once it has.
func (s *served) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the next wait
		return err
	case <-time.After(waitTimeout):
		t.Fatal("Serve did not return")
		return nil
	}
}

// post POSTs body signed to the served endpoint.
func (s *served) post(t *testing.T, body []byte) (int, []byte) {
	t.Helper()
	resp, err := s.client.Do(sdktest.NewSignedRequest(t, s.url, vectorSecret, "", time.Time{}, body))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func (s *served) health(t *testing.T) webhooksdk.HealthResponse {
	t.Helper()
	code, body := s.post(t, []byte(`{"type":"health"}`))
	var h webhooksdk.HealthResponse
	if err := json.Unmarshal(body, &h); code != http.StatusOK || err != nil {
		t.Fatalf("health probe: %d %s", code, body)
	}
	return h
}

func (s *served) task(t *testing.T, env webhooksdk.Envelope) (int, []byte) {
	t.Helper()
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return s.post(t, body)
}

// refusing reports whether the served address refuses connections: its listener closed.
func (s *served) refusing() bool {
	c, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(s.url, "http://"), "/"))
	if err == nil {
		_ = c.Close()
	}
	return err != nil
}

// gatedWork is a Work that waits for g (or its context) and reports {"done": true}.
func gatedWork(g *gate) func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
	return func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
		if err := g.wait(ctx); err != nil {
			return webhooksdk.Outcome{}, err
		}
		return webhooksdk.Outcome{Status: json.RawMessage(`{"done":true}`)}, nil
	}
}

// TestServe serves a provider over a real socket: health and an inline task answer as
// the Handler's do; cancelling the context closes the listener at once, and Serve
// returns nil only after the asynchronous Work still running has finished and its
// Result reached the callback.
func TestServe(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	g.Open()
	cb := sdktest.NewCallbackReceiver(t)
	ctx, cancel := context.WithCancel(t.Context())
	s := startServe(t, ctx, []webhooksdk.Provider{webhooksdk.WorkFunc("vpc", 1, gatedWork(g))})

	want := []webhooksdk.KindReadiness{{Kind: "vpc", KindVersion: 1, Ready: true}}
	if diff := cmp.Diff(want, s.health(t).Kinds); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}
	code, body := s.task(t, sdktest.TaskEnvelope(kvVPC))
	if res := decodeResult(t, body); code != http.StatusOK || res.Outcome == nil || string(res.Outcome.Status) != `{"done":true}` {
		t.Fatalf("inline task: %d %s", code, body)
	}

	// A second Serve, whose Work waits, answers 202 past a sync budget of 0. What the
	// callback receiver holds when it returns is read as it returns.
	slow := newGate(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(t.Context())
	defer cancel2()
	type stopped struct {
		err   error
		posts []sdktest.Post
	}
	done := make(chan stopped, 1)
	go func() {
		err := webhooksdk.Serve(ctx2, ln, []webhooksdk.Provider{webhooksdk.WorkFunc("vpc", 1, gatedWork(slow))},
			webhooksdk.WithSecrets(vectorSecret), webhooksdk.WithSyncBudget(0),
			webhooksdk.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
		done <- stopped{err, cb.Outcomes()}
	}()
	s2 := &served{url: "http://" + ln.Addr().String() + "/", client: &http.Client{}}
	env := sdktest.TaskEnvelope(kvVPC)
	env.Callback = cb.Callback(env.TaskID)
	if code, body := s2.task(t, env); code != http.StatusAccepted {
		t.Fatalf("async task: %d %s, want 202", code, body)
	}
	slow.waitEntered(t)
	cancel2()
	deadline := time.Now().Add(waitTimeout)
	for !s2.refusing() {
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts after the context ended")
		}
		time.Sleep(5 * time.Millisecond) // polling for the listener to close
	}
	slow.Open()
	select {
	case st := <-done:
		if st.err != nil {
			t.Errorf("Serve after a drained stop: %v, want nil", st.err)
		}
		if len(st.posts) != 1 || string(st.posts[0].Result(t).Outcome.Status) != `{"done":true}` {
			t.Errorf("callbacks when Serve returned: %+v, want the one Result", st.posts)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Serve did not return")
	}

	cancel()
	if err := s.wait(t); err != nil {
		t.Errorf("Serve: %v, want nil", err)
	}
}

// TestServeDrainTimeout: Work that outlasts the drain timeout is cancelled with cause
// ErrShutdown, and Serve says the drain timed out.
func TestServeDrainTimeout(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	cause := make(chan error, 1)
	work := func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		err := g.wait(ctx)
		cause <- err
		return webhooksdk.Outcome{}, err
	}
	cb := sdktest.NewCallbackReceiver(t)
	ctx, cancel := context.WithCancel(t.Context())
	s := startServe(t, ctx, []webhooksdk.Provider{webhooksdk.WorkFunc("vpc", 1, work)},
		webhooksdk.WithSyncBudget(0), webhooksdk.WithDrainTimeout(10*time.Millisecond))
	env := sdktest.TaskEnvelope(kvVPC)
	env.Callback = cb.Callback(env.TaskID)
	if code, body := s.task(t, env); code != http.StatusAccepted {
		t.Fatalf("task: %d %s, want 202", code, body)
	}
	g.waitEntered(t)
	cancel()
	if err := s.wait(t); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Serve = %v, want the drain's deadline exceeded", err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, webhooksdk.ErrShutdown) {
			t.Errorf("Work's context ended with %v, want ErrShutdown", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Work was not cancelled")
	}
}

// TestServeSignals: SIGINT and SIGTERM each stop Serve gracefully. Not parallel: the
// signal goes to the whole test process, and while it runs no parallel test does.
func TestServeSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			s := startServe(t, context.Background(), []webhooksdk.Provider{webhooksdk.WorkFunc("vpc", 1, gatedWork(newGate(t)))})
			s.health(t) // serving, so the signal is Serve's to handle
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			if err := s.wait(t); err != nil {
				t.Errorf("Serve after %v: %v, want nil", sig, err)
			}
		})
	}
}

// TestServeTLS serves HTTPS with the certificate WithTLS names.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t)
	s := startServe(t, t.Context(), []webhooksdk.Provider{webhooksdk.WorkFunc("vpc", 1, gatedWork(newGate(t)))},
		webhooksdk.WithTLS(certFile, keyFile))
	s.url = strings.Replace(s.url, "http://", "https://", 1)
	s.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	resp, err := s.client.Do(sdktest.NewSignedRequest(t, s.url, vectorSecret, "", time.Time{}, []byte(`{"type":"health"}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.ProtoMajor != 2 {
		t.Errorf("health over TLS: %s %s, TLS %v; want 200 over HTTP/2 and TLS", resp.Proto, resp.Status, resp.TLS != nil)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key to PEM files,
// and returns them with a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return certFile, keyFile, pool
}

// TestServeMiddleware: a middleware's route is served beside the Endpoint, and of two
// middlewares the first given sees the request first.
func TestServeMiddleware(t *testing.T) {
	t.Parallel()
	mark := func(name string) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Add("X-Middleware", name)
				next.ServeHTTP(w, r)
			})
		}
	}
	debug := func(next http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /debug", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "debug page") })
		mux.Handle("/", next)
		return mux
	}
	s := startServe(t, t.Context(), []webhooksdk.Provider{webhooksdk.WorkFunc("vpc", 1, gatedWork(newGate(t)))},
		webhooksdk.WithMiddleware(mark("outer")), webhooksdk.WithMiddleware(debug), webhooksdk.WithMiddleware(mark("inner")))

	resp, err := s.client.Get(s.url + "debug")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "debug page" || !cmp.Equal(resp.Header.Values("X-Middleware"), []string{"outer"}) {
		t.Errorf("GET /debug: %d %q, middlewares %q; want the page, through outer only", resp.StatusCode, body, resp.Header.Values("X-Middleware"))
	}
	resp, err = s.client.Do(sdktest.NewSignedRequest(t, s.url, vectorSecret, "", time.Time{}, []byte(`{"type":"health"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Values("X-Middleware"); resp.StatusCode != http.StatusOK || !cmp.Equal(got, []string{"outer", "inner"}) {
		t.Errorf("health: %d, middlewares %q; want 200 through outer, then inner", resp.StatusCode, got)
	}
}

// TestServeRefusesBadOptions: Serve checks its options and providers before serving,
// and closes the listener it was given; Handler refuses the serving options.
func TestServeRefusesBadOptions(t *testing.T) {
	t.Parallel()
	p := []webhooksdk.Provider{webhooksdk.WorkFunc("vpc", 1, gatedWork(newGate(t)))}
	secrets := webhooksdk.WithSecrets(vectorSecret)
	for _, tc := range []struct {
		name      string
		providers []webhooksdk.Provider
		opts      []webhooksdk.Option
		want      string
	}{
		{"no secrets", p, nil, "no signing secrets"},
		{"no providers", nil, []webhooksdk.Option{secrets}, "no providers"},
		{"negative drain", p, []webhooksdk.Option{secrets, webhooksdk.WithDrainTimeout(-time.Second)}, "with drain timeout: negative"},
		{"missing certificate", p, []webhooksdk.Option{secrets, webhooksdk.WithTLS(filepath.Join(t.TempDir(), "tls.crt"), "tls.key")}, "with tls: open"},
		{"nil middleware", p, []webhooksdk.Option{secrets, webhooksdk.WithMiddleware(nil)}, "with middleware: nil func"},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		err = webhooksdk.Serve(t.Context(), ln, tc.providers, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Serve = %v, want an error containing %q", tc.name, err, tc.want)
		}
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			_ = c.Close()
			t.Errorf("%s: the listener is still open", tc.name)
		}
	}

	certFile, keyFile, _ := selfSigned(t)
	for _, opt := range []webhooksdk.Option{
		webhooksdk.WithDrainTimeout(time.Second),
		webhooksdk.WithTLS(certFile, keyFile),
		webhooksdk.WithMiddleware(func(h http.Handler) http.Handler { return h }),
	} {
		_, err := webhooksdk.Handler(p, secrets, opt)
		if err == nil || !strings.Contains(err.Error(), "serving options, for Serve and ListenAndServe only") {
			t.Errorf("Handler with a serving option: %v, want it refused", err)
		}
	}
}

// TestListenAndServe listens on the address it is given, refuses one in use or empty,
// and checks the providers before it listens.
func TestListenAndServe(t *testing.T) {
	t.Parallel()
	p := []webhooksdk.Provider{webhooksdk.WorkFunc("vpc", 1, gatedWork(newGate(t)))}
	log := webhooksdk.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil)))
	addr := testnet.FreeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- webhooksdk.ListenAndServe(ctx, addr, p, webhooksdk.WithSecrets(vectorSecret), log) }()
	s := &served{url: "http://" + addr + "/", client: &http.Client{}, done: done}
	deadline := time.Now().Add(waitTimeout)
	for s.refusing() {
		select {
		case err := <-done:
			t.Fatalf("ListenAndServe returned before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s", addr)
		}
		time.Sleep(5 * time.Millisecond) // polling for the listener
	}
	s.health(t)

	// The address is taken now.
	if err := webhooksdk.ListenAndServe(t.Context(), addr, p, webhooksdk.WithSecrets(vectorSecret), log); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("ListenAndServe on an address in use: %v", err)
	}
	if err := webhooksdk.ListenAndServe(t.Context(), "", p, webhooksdk.WithSecrets(vectorSecret), log); err == nil || !strings.Contains(err.Error(), "empty listen address") {
		t.Errorf("ListenAndServe on an empty address: %v", err)
	}
	// Bad providers are refused before the address is looked at.
	if err := webhooksdk.ListenAndServe(t.Context(), addr, nil, webhooksdk.WithSecrets(vectorSecret), log); err == nil || !strings.Contains(err.Error(), "no providers") {
		t.Errorf("ListenAndServe without providers: %v", err)
	}

	cancel()
	if err := s.wait(t); err != nil {
		t.Errorf("ListenAndServe after cancel: %v, want nil", err)
	}
}
