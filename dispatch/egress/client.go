package egress

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
)

// ClientConfig configures NewClient. The zero value (plus a Policy) is a
// production client with the system roots and no client certificate.
type ClientConfig struct {
	Policy Policy
	// CABundle (PEM) replaces the system roots for verifying servers.
	CABundle []byte
	// ClientCertFile and ClientKeyFile name a PEM keypair presented for
	// mutual TLS. They are re-read at most every CertReload when they change
	// on disk (a rotated mounted secret), keeping the last good pair if a
	// read fails mid-rotation.
	ClientCertFile, ClientKeyFile string
	// CertReload is how often the client keypair files are checked.
	// Defaults to 1 minute.
	CertReload time.Duration
	// MaxIdleConnsPerHost bounds the kept-alive connections per host; set it
	// to the endpoint's max_concurrency so every delivery reuses a
	// connection. Defaults to 256.
	MaxIdleConnsPerHost int
	// DialTimeout bounds connection setup. Defaults to 10s.
	DialTimeout time.Duration
	// Resolver resolves target names; nil uses the system resolver. Tests
	// inject one to play DNS tricks on the dial-time guard.
	Resolver *net.Resolver
}

// NewClient returns the hardened client: the dial-time address guard on
// every connection, https only (unless the policy allows http), TLS >= 1.2,
// no proxy, no redirects (the 3xx response is returned as is), no transparent
// decompression, connection keep-alive. It sets no overall timeout: callers
// bound each request with its context.
func NewClient(cfg ClientConfig) (*http.Client, error) {
	tr, err := NewTransport(cfg)
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// Transport is an http.RoundTripper enforcing the policy's scheme rule in
// front of a guarded *http.Transport.
type Transport struct {
	policy Policy
	base   *http.Transport
}

// NewTransport returns the guarded transport under NewClient.
func NewTransport(cfg ClientConfig) (*Transport, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cfg.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("egress client: CA bundle holds no PEM certificate")
		}
		tlsCfg.RootCAs = pool
	}
	if (cfg.ClientCertFile == "") != (cfg.ClientKeyFile == "") {
		return nil, errors.New("egress client: client certificate and key files go together")
	}
	if cfg.ClientCertFile != "" {
		l := &certLoader{certFile: cfg.ClientCertFile, keyFile: cfg.ClientKeyFile, every: cmp.Or(cfg.CertReload, time.Minute)}
		if _, err := l.get(); err != nil {
			return nil, fmt.Errorf("egress client: %w", err)
		}
		tlsCfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return l.get() }
	}
	policy := cfg.Policy
	dialer := &net.Dialer{
		Timeout:   cmp.Or(cfg.DialTimeout, 10*time.Second),
		KeepAlive: 30 * time.Second,
		Resolver:  cfg.Resolver,
		// ControlContext runs after resolution, once per connection attempt,
		// with the literal address: the check DNS cannot dodge.
		ControlContext: func(ctx context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &BlockedError{Reason: fmt.Sprintf("unparsable dial address %q", address)}
			}
			if err := policy.CheckAddr(ap.Addr()); err != nil {
				return err
			}
			if plain, _ := ctx.Value(plainHTTPKey{}).(bool); plain {
				return policy.checkPlainHTTP(ap.Addr())
			}
			return nil
		},
	}
	per := cmp.Or(cfg.MaxIdleConnsPerHost, 256)
	base := &http.Transport{
		Proxy:                  nil, // never from the environment
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsCfg,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           0, // bounded per host instead
		MaxIdleConnsPerHost:    per,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &Transport{policy: policy, base: base}, nil
}

// plainHTTPKey marks the context of a plain-http request, so the dialer can
// hold it to dev mode's loopback-only rule. The dial context carries the
// request's values, and connections are pooled per scheme, so a plain-http
// connection is only ever dialed (and reused) under that rule.
type plainHTTPKey struct{}

// RoundTrip refuses a scheme the policy does not allow, then sends.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.policy.checkScheme(req.URL.Scheme); err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // RoundTrip must close the body, even on error
		}
		return nil, err
	}
	if req.URL.Scheme == "http" {
		req = req.WithContext(context.WithValue(req.Context(), plainHTTPKey{}, true))
	}
	return t.base.RoundTrip(req)
}

// CloseIdleConnections closes kept-alive connections (http.Client calls it).
func (t *Transport) CloseIdleConnections() { t.base.CloseIdleConnections() }

// certLoader serves a client keypair from files, re-reading them when they
// change so a rotated mounted secret is picked up without a restart.
type certLoader struct {
	certFile, keyFile string
	every             time.Duration

	mu      sync.Mutex
	cert    *tls.Certificate
	checked time.Time
	certPEM []byte
	keyPEM  []byte
}

func (l *certLoader) get() (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cert != nil && time.Since(l.checked) < l.every {
		return l.cert, nil
	}
	l.checked = time.Now()
	certPEM, err1 := os.ReadFile(l.certFile)
	keyPEM, err2 := os.ReadFile(l.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		return l.lastGood(fmt.Errorf("read client keypair: %w", err))
	}
	if l.cert != nil && bytes.Equal(certPEM, l.certPEM) && bytes.Equal(keyPEM, l.keyPEM) {
		return l.cert, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// A half-written file mid-rotation: keep serving the last good pair.
		return l.lastGood(fmt.Errorf("load client keypair %s: %w", l.certFile, err))
	}
	l.cert, l.certPEM, l.keyPEM = &pair, certPEM, keyPEM
	return l.cert, nil
}

func (l *certLoader) lastGood(err error) (*tls.Certificate, error) {
	if l.cert != nil {
		return l.cert, nil
	}
	return nil, err
}
