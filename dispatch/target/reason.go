package target

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

// Reasons a delivery got no answer, the class that starts each Reason.
const (
	ReasonTimeout     = "timeout"
	ReasonDNS         = "dns"
	ReasonRefused     = "refused"
	ReasonReset       = "reset"
	ReasonUnreachable = "unreachable"
	ReasonTLS         = "tls"
	ReasonBlocked     = "blocked"
	ReasonCredentials = "credentials"
	ReasonNetwork     = "network"
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
		be  *egress.BlockedError
		tl  *TooLargeError
		ua  *UnavailableError
		dns *net.DNSError
		ua1 x509.UnknownAuthorityError
		hn  x509.HostnameError
		ci  x509.CertificateInvalidError
		rh  tls.RecordHeaderError
		cv  *tls.CertificateVerificationError
		op  *net.OpError
		ne  net.Error
	)
	switch {
	case errors.As(err, &tl):
		return tl.Error()
	case errors.As(err, &ua):
		return ua.Error()
	case errors.As(err, &be):
		return ReasonBlocked + ": the egress policy refuses " + be.Reason
	case errors.Is(err, ErrCredentials):
		return ReasonCredentials + ": the dispatcher cannot get AWS credentials to sign the request"
	case errors.As(err, &dns):
		switch {
		case dns.IsNotFound:
			return ReasonDNS + ": " + dns.Name + " does not resolve"
		case dns.IsTimeout:
			return ReasonDNS + ": looking up " + dns.Name + " timed out"
		}
		return ReasonDNS + ": looking up " + dns.Name + " failed"
	case errors.As(err, &ua1):
		return ReasonTLS + ": the certificate is not signed by a trusted authority"
	case errors.As(err, &hn):
		return ReasonTLS + ": the certificate does not name the host"
	case errors.As(err, &ci):
		if ci.Reason == x509.Expired {
			return ReasonTLS + ": the certificate has expired or is not valid yet"
		}
		return ReasonTLS + ": the certificate is not valid"
	case errors.As(err, &cv):
		return ReasonTLS + ": the certificate is not valid"
	case errors.As(err, &rh):
		return ReasonTLS + ": the server does not speak TLS"
	case errors.As(err, &op) && op.Op == "remote error":
		return ReasonTLS + ": the server refused the TLS handshake"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout + ": no answer in time"
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonRefused + ": the connection was refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return ReasonUnreachable + ": no route to the host"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ReasonReset + ": the connection closed before the answer"
	}
	return ReasonNetwork + ": the request failed"
}

// NoAnswerError is an error Deliver returned, as a reader is shown it:
// Error is its Reason, Unwrap gives the error itself, for the server log
// and for errors.Is.
type NoAnswerError struct{ Err error }

func (e *NoAnswerError) Error() string { return Reason(e.Err) }

// Unwrap returns the error Deliver returned.
func (e *NoAnswerError) Unwrap() error { return e.Err }
