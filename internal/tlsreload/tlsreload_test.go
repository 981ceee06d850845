package tlsreload

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ca is a certificate authority made up for a test.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial struct {
	sync.Mutex
	n int64
}

func nextSerial() *big.Int {
	serial.Lock()
	defer serial.Unlock()
	serial.n++
	return big.NewInt(serial.n)
}

func newCA(t *testing.T, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key signed by c: a server one for
// 127.0.0.1, or a client one.
func (c *ca) issue(t *testing.T, name string, client bool) (certPEM, keyPEM []byte, serial *big.Int) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), tmpl.SerialNumber
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	// Replace, as a rotation does, so a reader never sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// files is a test's certificate files.
type files struct{ cert, key, ca string }

func newFiles(t *testing.T) files {
	dir := t.TempDir()
	return files{filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")}
}

// serve serves an echo over TLS with cfg until the test ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				b := make([]byte, 4)
				if _, err := io.ReadFull(c, b); err == nil {
					_, _ = c.Write(b)
				}
			})
		}
	})
	return ln.Addr().String()
}

// dial opens a new connection to addr trusting roots, presenting client
// (if any), exchanges a message, and returns the serial of the server's
// certificate.
func dial(addr string, roots *x509.CertPool, client []tls.Certificate) (*big.Int, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, Certificates: client, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	// Under TLS 1.3 the server refuses a client certificate after the
	// client's handshake is done: only the exchange tells.
	if _, err := c.Write([]byte("ping")); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func pool(cas ...*ca) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range cas {
		p.AddCert(c.cert)
	}
	return p
}

// TestRotation: a rotated pair is served to the next connection; a bad new
// pair is refused and the previous one kept; a good one after it is taken.
func TestRotation(t *testing.T) {
	t.Parallel()
	root := newCA(t, "root")
	f := newFiles(t)
	c1, k1, s1 := root.issue(t, "one", false)
	write(t, f.cert, c1)
	write(t, f.key, k1)
	r, err := New(Config{CertFile: f.cert, KeyFile: f.key})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.TLSConfig())
	want := func(s *big.Int, when string) {
		t.Helper()
		got, err := dial(addr, pool(root), nil)
		if err != nil || got.Cmp(s) != 0 {
			t.Fatalf("%s: served serial %v (err %v), want %v", when, got, err, s)
		}
	}
	want(s1, "at start")
	if r.reload() {
		t.Error("reload of unchanged files reported a change")
	}

	c2, k2, s2 := root.issue(t, "two", false)
	write(t, f.cert, c2)
	write(t, f.key, k2)
	if !r.reload() {
		t.Fatal("reload did not take the rotated pair")
	}
	want(s2, "after the rotation")

	// Half a rotation: the new certificate with the old key.
	c3, k3, s3 := root.issue(t, "three", false)
	write(t, f.cert, c3)
	if r.reload() {
		t.Fatal("reload took a certificate with another's key")
	}
	want(s2, "after a mismatched pair")
	write(t, f.key, []byte("not a key"))
	if r.reload() {
		t.Fatal("reload took a key that is not PEM")
	}
	want(s2, "after a broken key")
	write(t, f.key, k3)
	if !r.reload() {
		t.Fatal("reload did not take the pair once whole")
	}
	want(s3, "after the pair was completed")
}

// TestLoopReloads: started with an interval, the reloader notices rotated
// files by itself.
func TestLoopReloads(t *testing.T) {
	t.Parallel()
	root := newCA(t, "root")
	f := newFiles(t)
	c1, k1, _ := root.issue(t, "one", false)
	write(t, f.cert, c1)
	write(t, f.key, k1)
	r, err := New(Config{CertFile: f.cert, KeyFile: f.key, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	addr := serve(t, r.TLSConfig())
	c2, k2, s2 := root.issue(t, "two", false)
	write(t, f.key, k2)
	write(t, f.cert, c2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := dial(addr, pool(root), nil)
		if err == nil && got.Cmp(s2) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated certificate is not served: serial %v, err %v", got, err)
		}
		time.Sleep(10 * time.Millisecond) // polling for the reload
	}
}

// TestClientCA: with a client CA bundle a client without a certificate, or
// with one another CA signed, is refused, and one the bundle's CA signed
// gets through; a rotated bundle takes effect on the next connection.
func TestClientCA(t *testing.T) {
	t.Parallel()
	root, clients, others := newCA(t, "root"), newCA(t, "clients"), newCA(t, "others")
	f := newFiles(t)
	c, k, _ := root.issue(t, "server", false)
	write(t, f.cert, c)
	write(t, f.key, k)
	write(t, f.ca, clients.pem)
	r, err := New(Config{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.TLSConfig())
	client := func(by *ca) []tls.Certificate {
		c, k, _ := by.issue(t, "client", true)
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{pair}
	}
	good, other := client(clients), client(others)

	if _, err := dial(addr, pool(root), nil); err == nil {
		t.Error("a client without a certificate got through")
	}
	if _, err := dial(addr, pool(root), other); err == nil {
		t.Error("a client with a certificate from another CA got through")
	}
	if _, err := dial(addr, pool(root), good); err != nil {
		t.Errorf("a client with a certificate from the client CA was refused: %v", err)
	}

	write(t, f.ca, others.pem)
	if !r.reload() {
		t.Fatal("reload did not take the rotated client CA bundle")
	}
	if _, err := dial(addr, pool(root), other); err != nil {
		t.Errorf("after the rotation, a client of the new CA was refused: %v", err)
	}
	if _, err := dial(addr, pool(root), good); err == nil {
		t.Error("after the rotation, a client of the old CA got through")
	}
	write(t, f.ca, []byte("no certificates here"))
	if r.reload() {
		t.Fatal("reload took a client CA bundle without a certificate")
	}
	if _, err := dial(addr, pool(root), other); err != nil {
		t.Errorf("after a broken bundle, the previous one no longer holds: %v", err)
	}
}

// TestNewRefuses: files that cannot be read or do not load fail New, named.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	root := newCA(t, "root")
	f := newFiles(t)
	c, k, _ := root.issue(t, "server", false)
	write(t, f.cert, c)
	write(t, f.key, k)
	write(t, filepath.Join(filepath.Dir(f.ca), "empty.crt"), []byte("\n"))
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"missing cert":   {Config{CertFile: f.cert + ".missing", KeyFile: f.key}, "tls.crt.missing"},
		"cert as key":    {Config{CertFile: f.cert, KeyFile: f.cert}, "key pair"},
		"missing CA":     {Config{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca}, "ca.crt"},
		"empty CA":       {Config{CertFile: f.cert, KeyFile: f.key, ClientCAFile: filepath.Join(filepath.Dir(f.ca), "empty.crt")}, "empty.crt"},
		"no files":       {Config{}, "required"},
		"negative delay": {Config{CertFile: f.cert, KeyFile: f.key, Interval: -time.Second}, "negative"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error mentioning %q", name, err, tc.want)
		}
	}
}
