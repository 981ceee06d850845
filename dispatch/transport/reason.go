package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/convergeplane/converge/dispatch/egress"
)

// ErrCredentials matches a delivery that could not be signed because the
// pod has no AWS credentials to sign it with (errors.Is).
var ErrCredentials = errors.New("cannot retrieve AWS credentials")

// The classes a Reason starts with.
const (
	reasonTimeout     = "timeout"
	reasonDNS         = "dns"
	reasonRefused     = "refused"
	reasonReset       = "reset"
	reasonUnreachable = "unreachable"
	reasonTLS         = "tls"
	reasonBlocked     = "blocked"
	reasonCredentials = "credentials"
	reasonNetwork     = "network"
)

// Reason says why Deliver got no answer in the words a reader of the
// endpoint's state is shown (GET /endpoints/{name}, a resource waiting on
// it, the delivery log): a class (timeout, dns, refused, reset,
// unreachable, tls, blocked, credentials, network), a colon and a fixed
// phrase, naming at most the endpoint's host. It never repeats the error's
// own text, which names what only the operator may see: the pod's resolver
// ("lookup x on 10.96.0.10:53"), the addresses it dialled, its credential
// endpoint. Log err itself, server-side. The target's own refusals
// (TooLargeError, UnavailableError: the Lambda API's answer) are told as
// they are.
func Reason(err error) string {
	var (
		blocked     *egress.BlockedError
		tooLarge    *TooLargeError
		unavailable *UnavailableError
		dns         *net.DNSError
		authority   x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		record      tls.RecordHeaderError
		verify      *tls.CertificateVerificationError
		op          *net.OpError
		ne          net.Error
	)
	switch {
	case errors.As(err, &tooLarge):
		return tooLarge.Error()
	case errors.As(err, &unavailable):
		return unavailable.Error()
	case errors.As(err, &blocked) && blocked.Addr.IsValid():
		return reasonBlocked + ": the egress policy refuses " + blocked.Reason
	case blocked != nil: // a refused URL: the reason is the policy's own words
		return reasonBlocked + ": " + blocked.Reason
	case errors.Is(err, ErrCredentials):
		return reasonCredentials + ": the dispatcher cannot get AWS credentials to sign the request"
	case errors.As(err, &dns):
		switch {
		case dns.IsNotFound:
			return reasonDNS + ": " + dns.Name + " does not resolve"
		case dns.IsTimeout:
			return reasonDNS + ": looking up " + dns.Name + " timed out"
		}
		return reasonDNS + ": looking up " + dns.Name + " failed"
	case errors.As(err, &authority):
		return reasonTLS + ": the certificate is not signed by a trusted authority"
	case errors.As(err, &hostname):
		return reasonTLS + ": the certificate does not name the host"
	case errors.As(err, &invalid):
		if invalid.Reason == x509.Expired {
			return reasonTLS + ": the certificate has expired or is not valid yet"
		}
		return reasonTLS + ": the certificate is not valid"
	case errors.As(err, &verify):
		return reasonTLS + ": the certificate is not valid"
	case errors.As(err, &record):
		return reasonTLS + ": the server does not speak TLS"
	case errors.As(err, &op) && op.Op == "remote error":
		return reasonTLS + ": the server refused the TLS handshake"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return reasonTimeout + ": no answer in time"
	case errors.Is(err, syscall.ECONNREFUSED):
		return reasonRefused + ": the connection was refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return reasonUnreachable + ": no route to the host"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return reasonReset + ": the connection closed before the answer"
	}
	return reasonNetwork + ": the request failed"
}

// NoAnswerError is an error Deliver returned, as a reader is shown it:
// Error is its Reason, Unwrap gives the error itself, for the server log
// and for errors.Is.
type NoAnswerError struct{ Err error }

// Error returns the Reason of the error Deliver returned.
func (e *NoAnswerError) Error() string { return Reason(e.Err) }

// Unwrap returns the error Deliver returned.
func (e *NoAnswerError) Unwrap() error { return e.Err }
