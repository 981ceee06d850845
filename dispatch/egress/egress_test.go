package egress_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/egress/egresstest"
)

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	strict := egress.Policy{}
	allow := egress.Policy{AllowCIDRs: []netip.Prefix{
		netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fd00::/8"),
	}}
	exactMeta := egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}}
	tests := []struct {
		addr    string
		policy  egress.Policy
		blocked bool
		why     string
	}{
		{"8.8.8.8", strict, false, "public IPv4"},
		{"2606:4700:4700::1111", strict, false, "public IPv6"},
		{"127.0.0.1", strict, true, "loopback"},
		{"127.255.0.9", strict, true, "all of 127/8 is loopback"},
		{"::1", strict, true, "IPv6 loopback"},
		{"0.0.0.0", strict, true, "unspecified"},
		{"::", strict, true, "IPv6 unspecified"},
		{"10.0.0.1", strict, true, "RFC 1918"},
		{"172.16.5.4", strict, true, "RFC 1918"},
		{"172.32.0.1", strict, false, "just outside 172.16/12"},
		{"192.168.1.1", strict, true, "RFC 1918"},
		{"100.64.0.1", strict, true, "CGNAT"},
		{"169.254.1.1", strict, true, "link-local"},
		{"169.254.169.254", strict, true, "metadata"},
		{"fd00:ec2::254", strict, true, "IPv6 metadata"},
		{"fe80::1", strict, true, "IPv6 link-local"},
		{"fe80::1%eth0", strict, true, "zoned link-local"},
		{"fc00::1", strict, true, "unique-local"},
		{"ff02::1", strict, true, "IPv6 multicast"},
		{"224.0.0.1", strict, true, "multicast"},
		{"255.255.255.255", strict, true, "broadcast"},
		{"::ffff:127.0.0.1", strict, true, "IPv4-mapped loopback"},
		{"::ffff:8.8.8.8", strict, true, "IPv4-mapped is blocked outright"},
		{"64:ff9b::7f00:1", strict, true, "NAT64 embedding loopback"},
		{"64:ff9b::808:808", strict, false, "NAT64 embedding a public address"},
		{"2002:7f00:1::1", strict, true, "6to4 embedding loopback"},
		{"2002:a9fe:a9fe::1", strict, true, "6to4 embedding metadata"},
		{"2002:808:808::1", strict, false, "6to4 embedding a public address"},
		{"64:ff9b::a9fe:a9fe", strict, true, "NAT64 embedding metadata"},
		{"::169.254.169.254", strict, true, "IPv4-compatible metadata"},
		{"::127.0.0.1", strict, true, "IPv4-compatible loopback"},
		{"::10.0.0.1", strict, true, "IPv4-compatible private"},
		{"::8.8.8.8", strict, true, "IPv4-compatible is blocked outright (deprecated, RFC 4291)"},
		{"::ffff:0:7f00:1", strict, true, "IPv4-translated loopback"},
		{"::ffff:0:808:808", strict, true, "IPv4-translated is blocked outright"},
		{"64:ff9b:1::a9fe:a9fe", strict, true, "local-use NAT64"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", strict, true, "Teredo"},
		{"2001:0:a9fe:a9fe::5666:5601", strict, true, "Teredo with a metadata server"},
		{"2001:db8:1::1", strict, false, "just outside Teredo's 2001::/32"},
		{"2600:1f18:1:2:0:5efe:7f00:1", strict, true, "ISATAP embedding loopback"},
		{"2600:1f18:1:2:200:5efe:a9fe:a9fe", strict, true, "ISATAP (global) embedding metadata"},
		{"2600:1f18:1:2:200:5efe:808:808", strict, false, "ISATAP embedding a public address"},
		{"::127.0.0.1", egress.Policy{DevMode: true}, true, "dev mode permits loopback, not its IPv4-compatible form"},
		{"10.1.2.3", allow, false, "allowlisted private range"},
		{"10.2.0.1", allow, true, "private range outside the allowlist"},
		{"169.254.1.1", allow, false, "allowlisted link-local"},
		{"169.254.169.254", allow, true, "metadata needs an exact allowlist entry"},
		{"fd00:ec2::254", allow, true, "IPv6 metadata needs an exact entry"},
		{"169.254.169.254", exactMeta, false, "metadata listed exactly"},
		{"127.0.0.1", egress.Policy{DevMode: true}, false, "dev mode allows loopback"},
		{"::1", egress.Policy{DevMode: true}, false, "dev mode allows IPv6 loopback"},
		{"169.254.169.254", egress.Policy{DevMode: true}, true, "dev mode still blocks metadata"},
		{"10.0.0.5", egress.Policy{DevMode: true}, true, "dev mode still blocks private"},
		{"0.0.0.0", egress.Policy{DevMode: true}, true, "dev mode still blocks unspecified"},
	}
	for _, tc := range tests {
		t.Run(tc.addr+"/"+tc.why, func(t *testing.T) {
			err := tc.policy.CheckAddr(netip.MustParseAddr(tc.addr))
			if got := errors.Is(err, egress.ErrBlocked); got != tc.blocked {
				t.Errorf("CheckAddr(%s) = %v, want blocked=%v (%s)", tc.addr, err, tc.blocked, tc.why)
			}
		})
	}
}

func TestValidateTargetURL(t *testing.T) {
	t.Parallel()
	strict := egress.Policy{}
	tests := []struct {
		url     string
		policy  egress.Policy
		wantErr bool
		why     string
	}{
		{"https://provider.example.com/converge", strict, false, "a normal target"},
		{"https://provider.example.com:8443/x?y=1", strict, false, "port and query"},
		{"https://203.0.113.7/x", strict, false, "a public literal"},
		{"http://provider.example.com/x", strict, true, "plain http"},
		{"http://provider.example.com/x", egress.Policy{AllowHTTP: true}, false, "plain http allowed"},
		{"http://127.0.0.1:8080/x", egress.Policy{DevMode: true}, false, "dev mode"},
		{"https://127.0.0.1/x", strict, true, "loopback literal"},
		{"https://[::1]/x", strict, true, "IPv6 loopback literal"},
		{"https://localhost:8443/x", strict, true, "localhost"},
		{"https://api.localhost/x", strict, true, "a .localhost name"},
		{"https://169.254.169.254/latest/meta-data", strict, true, "metadata literal"},
		{"https://metadata.google.internal/", strict, true, "metadata name"},
		{"https://10.0.0.5/x", strict, true, "private literal"},
		{"https://10.0.0.5/x", egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, false, "allowlisted"},
		{"https://2130706433/x", strict, true, "decimal address form"},
		{"https://0x7f.0x0.0x0.0x1/x", strict, true, "hex address form"},
		{"https://[::169.254.169.254]/", strict, true, "IPv4-compatible metadata literal"},
		{"https://[::127.0.0.1]/", strict, true, "IPv4-compatible loopback literal"},
		{"https://[::ffff:169.254.169.254]/", strict, true, "IPv4-mapped metadata literal"},
		{"https://[64:ff9b::a9fe:a9fe]/", strict, true, "NAT64 metadata literal"},
		{"https://[64:ff9b::808:808]/", strict, false, "NAT64 public literal"},
		{"https://user:pw@provider.example.com/x", strict, true, "credentials"},
		{"https://provider.example.com/x#frag", strict, true, "fragment"},
		{"ftp://provider.example.com/x", strict, true, "other scheme"},
		{"/relative", strict, true, "relative"},
		{"https:///nohost", strict, true, "no host"},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			err := egress.ValidateTargetURL(tc.url, tc.policy)
			if (err != nil) != tc.wantErr {
				t.Errorf("ValidateTargetURL(%q) = %v, want error=%v", tc.url, err, tc.wantErr)
			}
		})
	}
}

// TestDevModeAllowsLoopbackOnly: dev mode adds loopback (and plain http to
// it) to what production reaches, and nothing more, both when an endpoint is
// registered and when the dispatcher dials.
func TestDevModeAllowsLoopbackOnly(t *testing.T) {
	t.Parallel()
	dev := egress.Policy{DevMode: true}
	devAllow := egress.Policy{DevMode: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
	for _, tc := range []struct {
		url     string
		policy  egress.Policy
		wantErr bool
	}{
		{"http://127.0.0.1:8080/x", dev, false},
		{"http://[::1]:8080/x", dev, false},
		{"http://localhost:8080/x", dev, false},
		{"https://provider.example.com/x", dev, false},
		{"http://169.254.169.254/latest/meta-data/", dev, true},
		{"https://169.254.169.254/latest/meta-data/", dev, true},
		{"http://10.0.0.5/x", dev, true},
		{"http://192.168.1.1/x", dev, true},
		{"http://[fd00:ec2::254]/x", dev, true},
		{"http://metadata.google.internal/computeMetadata/v1/", dev, true},
		{"http://0.0.0.0:8080/x", dev, true},
		{"http://2130706433/x", dev, true},
		{"http://203.0.113.7/x", dev, true}, // plain http off loopback
		{"https://203.0.113.7/x", dev, false},
		{"http://10.1.2.3/x", devAllow, false}, // the operator allowlist still works
		{"http://10.2.0.1/x", devAllow, true},
	} {
		err := egress.ValidateTargetURL(tc.url, tc.policy)
		if (err != nil) != tc.wantErr {
			t.Errorf("ValidateTargetURL(%q, dev) = %v, want error=%v", tc.url, err, tc.wantErr)
		}
	}

	// At dial time: a name that passes registration but resolves elsewhere.
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, tc := range []struct {
		addr, scheme string
		blocked      bool
	}{
		{"127.0.0.1", "http", false},
		{"169.254.169.254", "http", true},
		{"10.0.0.5", "http", true},
		{"192.168.1.1", "https", true},
		{"0.0.0.0", "http", true},
		{"203.0.113.7", "http", true}, // plain http only to loopback
	} {
		resolver, queries := egresstest.Resolver(netip.MustParseAddr(tc.addr))
		c := mustClient(t, egress.ClientConfig{Policy: dev, Resolver: resolver, DialTimeout: 5 * time.Second})
		_, err := get(t, c, tc.scheme+"://provider.example.net:"+port+"/")
		if got := errors.Is(err, egress.ErrBlocked); got != tc.blocked {
			t.Errorf("dev-mode dial of %s over %s: err = %v, want blocked=%v", tc.addr, tc.scheme, err, tc.blocked)
		}
		if queries.Load() == 0 {
			t.Errorf("%s: the fake resolver was never asked: the case proves nothing", tc.addr)
		}
	}
	if hits.Load() != 1 {
		t.Errorf("server saw %d requests, want only the loopback one", hits.Load())
	}
}

func TestParseCIDRs(t *testing.T) {
	t.Parallel()
	got, err := egress.ParseCIDRs("10.0.0.0/8, 127.0.0.1  fd00::/8,10.1.2.3/16")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "127.0.0.1/32", "fd00::/8", "10.1.0.0/16"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("entry %d = %s, want %s", i, got[i], want[i])
		}
	}
	if _, err := egress.ParseCIDRs("10.0.0.0/33"); err == nil {
		t.Error("a bad prefix was accepted")
	}
	if _, err := egress.ParseCIDRs("example.com"); err == nil {
		t.Error("a name was accepted")
	}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func mustClient(t *testing.T, cfg egress.ClientConfig) *http.Client {
	t.Helper()
	c, err := egress.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func TestClientDialGuard(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)

	t.Run("loopback refused at dial time", func(t *testing.T) {
		c := mustClient(t, egress.ClientConfig{Policy: egress.Policy{AllowHTTP: true}})
		_, err := get(t, c, srv.URL)
		if !errors.Is(err, egress.ErrBlocked) {
			t.Fatalf("err = %v, want ErrBlocked", err)
		}
	})
	t.Run("http refused without dev mode or the http allowlist", func(t *testing.T) {
		c := mustClient(t, egress.ClientConfig{Policy: egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
		_, err := get(t, c, srv.URL)
		if !errors.Is(err, egress.ErrBlocked) {
			t.Fatalf("err = %v, want ErrBlocked", err)
		}
	})
	t.Run("allowlisted loopback reaches the server", func(t *testing.T) {
		c := mustClient(t, egress.ClientConfig{Policy: egress.Policy{AllowHTTP: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
		if _, err := get(t, c, srv.URL); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("dev mode reaches the server", func(t *testing.T) {
		c := mustClient(t, egress.ClientConfig{Policy: egress.Policy{DevMode: true}})
		if _, err := get(t, c, srv.URL); err != nil {
			t.Fatal(err)
		}
	})
	if hits.Load() != 2 {
		t.Errorf("server saw %d requests, want exactly the 2 allowed ones", hits.Load())
	}
}

// TestClientDNSRebinding resolves a name that passes registration checks to
// a loopback address, as a rebinding attacker's DNS would: the dial-time
// guard sees the resolved address and refuses it.
func TestClientDNSRebinding(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	target := "http://rebind.example.net:" + port + "/hook"

	resolver, queries := egresstest.Resolver(netip.MustParseAddr("127.0.0.1"))
	if err := egress.ValidateTargetURL(target, egress.Policy{AllowHTTP: true}); err != nil {
		t.Fatalf("registration check refused the name (it cannot know where it resolves): %v", err)
	}

	c := mustClient(t, egress.ClientConfig{Policy: egress.Policy{AllowHTTP: true}, Resolver: resolver})
	_, err := get(t, c, target)
	var be *egress.BlockedError
	if !errors.As(err, &be) || be.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("err = %v, want a BlockedError for 127.0.0.1", err)
	}
	if queries.Load() == 0 {
		t.Fatal("the fake resolver was never asked: the test proves nothing")
	}

	// Same resolver, loopback allowlisted: the request goes through, so the
	// refusal above came from the resolved address alone.
	ok := mustClient(t, egress.ClientConfig{Policy: egress.Policy{AllowHTTP: true,
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, Resolver: resolver})
	if _, err := get(t, ok, target); err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 1 {
		t.Errorf("server saw %d requests, want 1", hits.Load())
	}
}

// TestClientRefusesEmbeddedIPv4 dials IPv6 forms that carry a blocked IPv4
// address, as a literal and as what a name resolves to: the dial-time guard
// refuses each before a connection is attempted. ::127.0.0.1 and
// ::169.254.169.254 (IPv4-compatible) were dialled.
func TestClientRefusesEmbeddedIPv4(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"::127.0.0.1", "::169.254.169.254", "::ffff:0:a9fe:a9fe", "2001:0:a9fe:a9fe::1",
		"64:ff9b::7f00:1", "2002:7f00:1::1", "2600:1f18:1:2:200:5efe:a9fe:a9fe"} {
		t.Run(addr, func(t *testing.T) {
			t.Parallel()
			a := netip.MustParseAddr(addr)
			literal := mustClient(t, egress.ClientConfig{Policy: egress.Policy{AllowHTTP: true}})
			_, err := get(t, literal, "http://"+netip.AddrPortFrom(a, 8080).String()+"/hook")
			var be *egress.BlockedError
			if !errors.As(err, &be) || be.Addr != a {
				t.Errorf("literal: err = %v, want a BlockedError for %s", err, a)
			}
			resolver, queries := egresstest.Resolver(a)
			named := mustClient(t, egress.ClientConfig{Policy: egress.Policy{AllowHTTP: true}, Resolver: resolver})
			_, err = get(t, named, "http://rebind.example.net:8080/hook")
			if !errors.As(err, &be) || be.Addr != a {
				t.Errorf("resolved: err = %v, want a BlockedError for %s", err, a)
			}
			if queries.Load() == 0 {
				t.Error("the fake resolver was never asked: the test proves nothing")
			}
		})
	}
}

func TestClientNeverFollowsRedirects(t *testing.T) {
	t.Parallel()
	var followed atomic.Int32
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { followed.Add(1) }))
	t.Cleanup(dest.Close)
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, dest.URL, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(src.Close)
	c := mustClient(t, egress.ClientConfig{Policy: egress.Policy{DevMode: true}})
	resp, err := get(t, c, src.URL)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTemporaryRedirect || followed.Load() != 0 {
		t.Fatalf("status %d, destination hit %d times; want the 307 itself and no follow", resp.StatusCode, followed.Load())
	}
}

func TestClientIgnoresProxyEnvironment(t *testing.T) {
	// Not parallel: it sets the process environment.
	var proxied, direct atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxied.Add(1) }))
	t.Cleanup(proxy.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { direct.Add(1) }))
	t.Cleanup(srv.Close)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("HTTPS_PROXY", proxy.URL)
	t.Setenv("NO_PROXY", "")
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	// A non-local name, which an environment proxy would capture.
	resolver, _ := egresstest.Resolver(netip.MustParseAddr("127.0.0.1"))
	c := mustClient(t, egress.ClientConfig{Policy: egress.Policy{DevMode: true}, Resolver: resolver})
	if _, err := get(t, c, "http://provider.example.net:"+port+"/"); err != nil {
		t.Fatal(err)
	}
	if proxied.Load() != 0 || direct.Load() != 1 {
		t.Fatalf("proxy saw %d, server %d; want the request sent directly", proxied.Load(), direct.Load())
	}
}

func TestClientTLS(t *testing.T) {
	t.Parallel()
	pki := newPKI(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client cert", http.StatusForbidden)
			return
		}
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{pki.server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pki.pool,
		MinVersion:   tls.VersionTLS12,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	allowLoop := egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

	t.Run("system roots do not trust a private CA", func(t *testing.T) {
		c := mustClient(t, egress.ClientConfig{Policy: allowLoop})
		if _, err := get(t, c, srv.URL); err == nil {
			t.Fatal("a certificate from an unknown CA was accepted")
		}
	})
	t.Run("CA bundle but no client cert is refused by the server", func(t *testing.T) {
		c := mustClient(t, egress.ClientConfig{Policy: allowLoop, CABundle: pki.caPEM})
		if _, err := get(t, c, srv.URL); err == nil {
			t.Fatal("mTLS server accepted a client without a certificate")
		}
	})
	t.Run("CA bundle and client cert", func(t *testing.T) {
		c := mustClient(t, egress.ClientConfig{Policy: allowLoop, CABundle: pki.caPEM,
			ClientCertFile: pki.clientCertFile, ClientKeyFile: pki.clientKeyFile})
		resp, err := get(t, c, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("bad bundle and missing files fail at construction", func(t *testing.T) {
		if _, err := egress.NewClient(egress.ClientConfig{CABundle: []byte("nope")}); err == nil {
			t.Error("a bad CA bundle was accepted")
		}
		if _, err := egress.NewClient(egress.ClientConfig{ClientCertFile: "/nonexistent", ClientKeyFile: "/nonexistent"}); err == nil {
			t.Error("missing keypair files were accepted")
		}
	})
}

type pki struct {
	pool                          *x509.CertPool
	caPEM                         []byte
	server                        tls.Certificate
	clientCertFile, clientKeyFile string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips, KeyUsage: x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	}
	var p pki
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	sc, sk := issue("server", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	if p.server, err = tls.X509KeyPair(sc, sk); err != nil {
		t.Fatal(err)
	}
	cc, ck := issue("dispatcher", x509.ExtKeyUsageClientAuth, nil)
	dir := t.TempDir()
	p.clientCertFile, p.clientKeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(p.clientCertFile, cc, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.clientKeyFile, ck, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
