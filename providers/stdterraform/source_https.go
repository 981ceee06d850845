package stdterraform

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"
)

// WithCAFile sets a PEM file of CA certificates that replaces the system roots for
// https:// and git::https:// module sources (default: the system roots). It is read at
// each fetch, so a rotated file is picked up.
func WithCAFile(path string) Option { return func(p *provider) { p.caFile = path } }

// maxRedirects bounds the redirects an https source may follow, each to https.
const maxRedirects = 5

// httpsClient is the client for https sources: TLS 1.2 or later against the system
// roots or the CA file, no proxy from the environment, redirects only to https.
func (p *provider) httpsClient() (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if p.caFile != "" {
		pem, err := os.ReadFile(p.caFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", p.caFile)
		}
		tlsCfg.RootCAs = pool
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil,
			TLSClientConfig:       tlsCfg,
			ForceAttemptHTTP2:     true,
			TLSHandshakeTimeout:   30 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			DisableCompression:    true,
			DisableKeepAlives:     true, // a client per fetch: no idle connection outlives it
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != "https" {
				return fmt.Errorf("%w: a redirect to %s leaves https", errContent, req.URL.Redacted())
			}
			if len(via) > maxRedirects {
				return fmt.Errorf("more than %d redirects", maxRedirects)
			}
			return nil
		},
	}, nil
}

// openHTTPS GETs an https archive. Any answer but 200 is transient: a 404 may be an
// archive not yet published.
func (p *provider) openHTTPS(ctx context.Context, u *url.URL) (object, error) {
	client, err := p.httpsClient()
	if err != nil {
		return object{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return object{}, fmt.Errorf("%w: %w", errContent, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) && errors.Is(uerr.Err, errContent) {
			return object{}, uerr.Err
		}
		return object{}, fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return object{}, fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
	}
	return object{body: resp.Body}, nil
}
