package transport_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/transport"
)

// TestReason: each error a delivery gets without an answer is shown as its
// class and a fixed phrase, naming at most the endpoint's host: never the
// resolver, an address dialled, or a credential endpoint the error holds.
func TestReason(t *testing.T) {
	t.Parallel()
	// As http.Client returns them: a *url.Error around the dial's error.
	sent := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://provider.example.net/converge", Err: err}
	}
	dial := func(err error) error {
		return sent(&net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 443}, Err: err})
	}
	const secret = "10.96.0.10" // what must never be shown
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no such host", dial(&net.DNSError{Err: "no such host", Name: "provider.example.net", Server: secret + ":53", IsNotFound: true}),
			"dns: provider.example.net does not resolve"},
		{"lookup timed out", dial(&net.DNSError{Err: "i/o timeout", Name: "provider.example.net", Server: secret + ":53", IsTimeout: true}),
			"dns: looking up provider.example.net timed out"},
		{"lookup failed", dial(&net.DNSError{Err: "server misbehaving", Name: "provider.example.net", Server: secret + ":53"}),
			"dns: looking up provider.example.net failed"},
		{"refused", dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), "refused: the connection was refused"},
		{"unreachable", dial(os.NewSyscallError("connect", syscall.EHOSTUNREACH)), "unreachable: no route to the host"},
		{"reset", sent(fmt.Errorf("read tcp %s:1->10.1.2.3:443: %w", secret, syscall.ECONNRESET)), "reset: the connection closed before the answer"},
		{"closed mid-answer", fmt.Errorf("read response: %w", io.ErrUnexpectedEOF), "reset: the connection closed before the answer"},
		{"deadline", sent(context.DeadlineExceeded), "timeout: no answer in time"},
		{"dial timeout", dial(os.ErrDeadlineExceeded), "timeout: no answer in time"},
		{"untrusted certificate", sent(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}),
			"tls: the certificate is not signed by a trusted authority"},
		{"certificate of another host", sent(&tls.CertificateVerificationError{Err: x509.HostnameError{Host: secret}}),
			"tls: the certificate does not name the host"},
		{"expired certificate", sent(&tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}}),
			"tls: the certificate has expired or is not valid yet"},
		{"not TLS", sent(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), "tls: the server does not speak TLS"},
		{"handshake refused", sent(&net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}), "tls: the server refused the TLS handshake"},
		{"blocked at dial time", dial(&egress.BlockedError{Addr: netip.MustParseAddr(secret), Reason: "a private (RFC 1918) address"}),
			"blocked: the egress policy refuses a private (RFC 1918) address"},
		{"plain http refused", sent(&egress.BlockedError{Reason: "plain http is not allowed; use https"}),
			"blocked: plain http is not allowed; use https"},
		{"no credentials", fmt.Errorf("%w: %w", transport.ErrCredentials, dial(os.NewSyscallError("connect", syscall.ECONNREFUSED))),
			"credentials: the dispatcher cannot get AWS credentials to sign the request"},
		{"anything else", sent(errors.New("http: server gave HTTP response to HTTPS client at " + secret)), "network: the request failed"},
		{"too large", &transport.TooLargeError{Size: 7 << 20, Limit: 6 << 20}, (&transport.TooLargeError{Size: 7 << 20, Limit: 6 << 20}).Error()},
	} {
		got := transport.Reason(tc.err)
		if got != tc.want {
			t.Errorf("%s: Reason = %q, want %q", tc.name, got, tc.want)
		}
		if strings.Contains(got, secret) || strings.Contains(got, "10.1.2.3") {
			t.Errorf("%s: Reason %q shows an address", tc.name, got)
		}
		na := &transport.NoAnswerError{Err: tc.err}
		if na.Error() != got || !errors.Is(na, tc.err) {
			t.Errorf("%s: NoAnswerError reads %q, unwraps to the error: %v", tc.name, na.Error(), errors.Is(na, tc.err))
		}
	}
}
