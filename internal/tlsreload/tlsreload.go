// Package tlsreload serves TLS from certificate files that are replaced
// while the process runs (a cert-manager or Secrets Store rotation): it
// re-reads them every interval and serves the newest pair that loads, so a
// renewed certificate takes effect on the next connection without a
// restart. A new pair that does not load (half written, mismatched, not PEM)
// is logged and the previous one kept.
//
// With a client CA bundle it also requires every client to present a
// certificate that bundle verifies (mutual TLS); the bundle is re-read the
// same way.
package tlsreload

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/convergeplane/converge/internal/startstop"
)

// Config names the files and how often they are re-read.
type Config struct {
	// CertFile and KeyFile are the PEM certificate (chain) and its key.
	// Required.
	CertFile, KeyFile string
	// ClientCAFile, when set, is a PEM bundle of the CAs a client's
	// certificate must chain to; clients without one are refused.
	ClientCAFile string
	// Interval is how often the files are re-read; 0 never re-reads them.
	Interval time.Duration
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
}

// Reloader holds the TLS material in use. Start it to re-read the files.
type Reloader struct {
	cfg  Config
	log  *slog.Logger
	loop startstop.Loop
	cur  atomic.Pointer[state]
	// seen is the files' content last read, loaded or not, so an unchanged
	// (or already refused) set is not parsed and logged again. Only New and
	// the loop touch it.
	seen [][]byte
}

// state is one loaded set of files.
type state struct {
	cert *tls.Certificate
	// client is the configuration of a handshake with ClientCAFile: it
	// carries this set's CA pool.
	client *tls.Config
}

// New loads the files, failing if they cannot be read or do not load.
func New(cfg Config) (*Reloader, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("tlsreload: CertFile and KeyFile are required")
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("tlsreload: Interval must not be negative (got %s)", cfg.Interval)
	}
	r := &Reloader{cfg: cfg, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	files, err := r.read()
	if err != nil {
		return nil, err
	}
	st, err := r.parse(files)
	if err != nil {
		return nil, err
	}
	r.seen = files
	r.cur.Store(st)
	return r, nil
}

// TLSConfig returns the server configuration to serve with (TLS 1.2 and
// up): every handshake takes the certificate, and client CAs, loaded last.
func (r *Reloader) TLSConfig() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.certificate}
	if r.cfg.ClientCAFile != "" {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.cur.Load().client, nil }
	}
	return c
}

func (r *Reloader) certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cur.Load().cert, nil
}

// Start re-reads the files every Interval until Stop (never with Interval
// 0).
func (r *Reloader) Start(ctx context.Context) error {
	if r.cfg.Interval > 0 {
		r.loop.Start(ctx, r.run)
	}
	return nil
}

// Stop stops re-reading; the material loaded stays in use.
func (r *Reloader) Stop() { r.loop.Stop() }

func (r *Reloader) run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.reload()
		}
	}
}

// reload re-reads the files and, if they changed, loads them; it reports
// whether a new set is in use.
func (r *Reloader) reload() bool {
	files, err := r.read()
	if err != nil {
		r.log.Error("tls: cannot re-read the certificate files; serving the previous ones", "err", err)
		return false
	}
	if equal(files, r.seen) {
		return false
	}
	r.seen = files
	st, err := r.parse(files)
	if err != nil {
		r.log.Error("tls: the changed certificate files do not load; serving the previous ones", "err", err)
		return false
	}
	r.cur.Store(st)
	r.log.Info("tls: certificate reloaded", "file", r.cfg.CertFile, "subject", st.cert.Leaf.Subject.String(),
		"not_after", st.cert.Leaf.NotAfter)
	return true
}

// read returns the content of the cert, key and (if set) client CA files.
func (r *Reloader) read() ([][]byte, error) {
	names := []string{r.cfg.CertFile, r.cfg.KeyFile}
	if r.cfg.ClientCAFile != "" {
		names = append(names, r.cfg.ClientCAFile)
	}
	files := make([][]byte, len(names))
	for i, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("tlsreload: %w", err)
		}
		files[i] = b
	}
	return files, nil
}

func (r *Reloader) parse(files [][]byte) (*state, error) {
	cert, err := tls.X509KeyPair(files[0], files[1])
	if err != nil {
		return nil, fmt.Errorf("tlsreload: key pair %s, %s: %w", r.cfg.CertFile, r.cfg.KeyFile, err)
	}
	st := &state{cert: &cert}
	if r.cfg.ClientCAFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(files[2]) {
			return nil, fmt.Errorf("tlsreload: client CA bundle %s holds no PEM certificate", r.cfg.ClientCAFile)
		}
		st.client = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.certificate,
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	}
	return st, nil
}

func equal(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
