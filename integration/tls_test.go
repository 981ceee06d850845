package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
)

// testCA is a certificate authority made up for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key the CA signed, with serial: for
// a server on 127.0.0.1, or a client.
func (c *testCA) issue(t *testing.T, serial int64, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "converge"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	if client {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	must(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// replaceFile writes b to path by renaming a new file over it, as a
// certificate rotation does.
func replaceFile(t *testing.T, path string, b []byte) {
	t.Helper()
	must(t, os.WriteFile(path+".new", b, 0o600))
	must(t, os.Rename(path+".new", path))
}

// httpsGet GETs /livez over a new connection trusting ca, presenting
// client if any, and returns the serial of the server's certificate.
func httpsGet(t *testing.T, addr string, ca *testCA, client []tls.Certificate) (int64, error) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: client, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/livez")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /livez over TLS = %d", resp.StatusCode)
	}
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), nil
}

// TestTLSReloadAndClientCA serves the API over https with a client CA: a
// client without a certificate is refused and one the CA signed gets
// through; rotating the certificate files serves the new certificate to
// the next connection, without a restart.
func TestTLSReloadAndClientCA(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	c, k := ca.issue(t, 100, false)
	replaceFile(t, certFile, c)
	replaceFile(t, keyFile, k)
	replaceFile(t, caFile, ca.pem)
	srv, _ := startOps(t, t.Context(), convergecli.RoleControl, func(cfg *convergecli.Config) {
		cfg.TLS, cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = true, certFile, keyFile, caFile
		cfg.TLSReloadInterval = 20 * time.Millisecond
	})
	cc, ck := ca.issue(t, 200, true)
	pair, err := tls.X509KeyPair(cc, ck)
	must(t, err)
	client := []tls.Certificate{pair}

	if _, err := httpsGet(t, srv.Addr(), ca, nil); err == nil {
		t.Fatal("a client without a certificate got through")
	}
	if serial, err := httpsGet(t, srv.Addr(), ca, client); err != nil || serial != 100 {
		t.Fatalf("a client with a certificate the CA signed: serial %d, %v; want the served 100", serial, err)
	}

	c, k = ca.issue(t, 101, false)
	replaceFile(t, keyFile, k)
	replaceFile(t, certFile, c)
	waitFor(t, 10*time.Second, "the rotated certificate to be served", func() bool {
		serial, err := httpsGet(t, srv.Addr(), ca, client)
		return err == nil && serial == 101
	})
}
