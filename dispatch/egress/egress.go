// Package egress is the dispatcher's hardened outbound HTTP client: every
// request it makes goes to a provider endpoint an operator registered, so it
// must not become a way to reach what the operator did not mean to expose
// (SSRF): the cloud metadata service, the pod's loopback, the cluster's
// private network.
//
// The defence is layered:
//
//   - ValidateTargetURL refuses a bad target at registration (the API calls
//     it): plain http, credentials in the URL, and literal addresses or
//     well-known names in blocked ranges.
//   - The dialer checks the address it is about to connect to, after DNS
//     resolution, on every connection (net.Dialer.ControlContext). That is
//     the authoritative check: a name that resolved to a public address at
//     registration and to 127.0.0.1 now (DNS rebinding) is refused at dial
//     time.
//   - The client never follows redirects (a 3xx is returned to the caller,
//     which classifies it a failure), never uses a proxy from the
//     environment, requires TLS 1.2 or later, and callers cap response
//     bodies.
//
// Blocked unless permitted: unspecified (0.0.0.0/8, ::), loopback
// (127.0.0.0/8, ::1), RFC 1918 private ranges, carrier-grade NAT
// (100.64.0.0/10), link-local (169.254.0.0/16, fe80::/10) including the
// cloud metadata addresses (169.254.169.254, 169.254.170.2, fd00:ec2::254),
// IETF/benchmarking/reserved IPv4 (192.0.0.0/24, 198.18.0.0/15,
// 240.0.0.0/4), multicast (224.0.0.0/4, ff00::/8), unique-local (fc00::/7),
// deprecated site-local (fec0::/10), and every IPv6 form that carries an
// IPv4 address a translator or tunnel may reach:
//
//   - blocked outright, whatever address they embed: IPv4-mapped
//     (::ffff:0:0/96), IPv4-compatible (::/96, deprecated by RFC 4291),
//     IPv4-translated (::ffff:0:0:0/96, RFC 2765), local-use NAT64
//     (64:ff9b:1::/48, which embeds at a network-chosen offset), and Teredo
//     (2001::/32, which embeds its server's address and its client's
//     inverted): no provider endpoint is reached at one;
//   - checked as the IPv4 address they embed, so a public one passes: NAT64
//     (64:ff9b::/96, how an IPv6-only pod reaches IPv4 providers), 6to4
//     (2002::/16) and an ISATAP interface identifier (…:0:5efe:a.b.c.d,
//     …:200:5efe:a.b.c.d, under any prefix).
//
// A network-specific NAT64 prefix (RFC 6052) or a 6rd prefix is the
// network's own choice, invisible here: where the pods use one, allowlist
// nothing under it that embeds a blocked address.
// Policy.AllowCIDRs permits the listed prefixes (a metadata address only when
// listed exactly, as a /32 or /128). Policy.DevMode permits loopback
// (127.0.0.0/8, ::1, their IPv4-mapped forms, localhost) and plain http to
// loopback or an allowlisted prefix, and nothing more: private, link-local,
// metadata and unspecified addresses stay blocked in dev mode too.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// Policy says which targets outbound requests may reach.
type Policy struct {
	// DevMode permits loopback addresses, and plain http to loopback (or to
	// an AllowCIDRs prefix), for `converge dev` and tests. Every other
	// address is checked as in production. Never set it in production.
	DevMode bool
	// AllowHTTP permits plain-http targets outside dev mode, e.g. a sidecar
	// or a mesh that terminates TLS. Addresses are still checked.
	AllowHTTP bool
	// AllowCIDRs permits these prefixes even inside a blocked range, e.g. the
	// private network the providers run in.
	AllowCIDRs []netip.Prefix
}

// ErrBlocked matches every refusal by the policy (errors.Is).
var ErrBlocked = errors.New("egress blocked by policy")

// BlockedError is a refusal: the address (or URL) and the rule it broke.
type BlockedError struct {
	// Addr is the refused address; invalid when the refusal is of a URL.
	Addr netip.Addr
	// Reason names the rule, e.g. "loopback" or "cloud metadata".
	Reason string
}

func (e *BlockedError) Error() string {
	if e.Addr.IsValid() {
		return fmt.Sprintf("egress blocked by policy: %s is %s (allow it with an operator CIDR allowlist)", e.Addr, e.Reason)
	}
	return "egress blocked by policy: " + e.Reason
}

// Is makes errors.Is(err, ErrBlocked) hold.
func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

type blockedRange struct {
	prefix netip.Prefix
	reason string
}

// metadata addresses get their own reason, and an allowlist must name them
// exactly to permit them: a broad allowlisted range never exposes them.
var metadataAddrs = map[netip.Addr]bool{ // immutable table
	netip.MustParseAddr("169.254.169.254"): true, // AWS, GCP, Azure, OpenStack IMDS
	netip.MustParseAddr("169.254.170.2"):   true, // ECS task metadata
	netip.MustParseAddr("fd00:ec2::254"):   true, // AWS IMDS over IPv6
}

var blockedRanges = []blockedRange{ // immutable table
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible IPv6 address"}, // after ::/128 and ::1/128, which it holds
	{netip.MustParsePrefix("::ffff:0:0/96"), "an IPv4-mapped IPv6 address"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "an IPv4-translated IPv6 address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique-local address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

var (
	nat64Prefix   = netip.MustParsePrefix("64:ff9b::/96") // immutable
	sixToFourPref = netip.MustParsePrefix("2002::/16")    // immutable
)

// CheckAddr returns nil if the policy lets a connection reach a, else a
// *BlockedError.
func (p Policy) CheckAddr(a netip.Addr) error {
	a = a.WithZone("")
	if !a.IsValid() {
		return &BlockedError{Reason: "an invalid address"}
	}
	if p.DevMode && isLoopback(a) {
		return nil
	}
	if metadataAddrs[a] || metadataAddrs[a.Unmap()] {
		if p.allowsExactly(a) || p.allowsExactly(a.Unmap()) {
			return nil
		}
		return &BlockedError{Addr: a, Reason: "a cloud metadata address"}
	}
	if p.allows(a) || (a.Is4In6() && p.allows(a.Unmap())) {
		return nil
	}
	for _, r := range blockedRanges {
		if r.prefix.Contains(a) {
			return &BlockedError{Addr: a, Reason: r.reason}
		}
	}
	// Addresses that embed an IPv4 address reach it through a translator.
	if v4, ok := embeddedV4(a); ok {
		if err := p.CheckAddr(v4); err != nil {
			return &BlockedError{Addr: a, Reason: "an address embedding " + v4.String()}
		}
	}
	return nil
}

// checkPlainHTTP is the dial-time rule for a plain-http connection that only
// dev mode permits: it must go to loopback or an allowlisted prefix. With
// AllowHTTP (an operator's choice) the address rules alone apply.
func (p Policy) checkPlainHTTP(a netip.Addr) error {
	a = a.WithZone("")
	if !p.DevMode || p.AllowHTTP || isLoopback(a) || p.allows(a) || p.allows(a.Unmap()) {
		return nil
	}
	return &BlockedError{Addr: a, Reason: "not a loopback address, and dev mode permits plain http only to loopback"}
}

// isLoopback holds for 127.0.0.0/8, ::1 and IPv4-mapped 127.0.0.0/8.
func isLoopback(a netip.Addr) bool { return a.Unmap().IsLoopback() }

// embeddedV4 returns the IPv4 address a reaches through a translator or
// tunnel, for the forms checked as that address (see the package doc).
func embeddedV4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() || a.Is4In6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case nat64Prefix.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFourPref.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case b[8]&^0x03 == 0 && b[9] == 0 && b[10] == 0x5e && b[11] == 0xfe: // ISATAP (RFC 5214), u/g bits either way
		return netip.AddrFrom4([4]byte(b[12:16])), true
	}
	return netip.Addr{}, false
}

func (p Policy) allows(a netip.Addr) bool {
	for _, c := range p.AllowCIDRs {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

func (p Policy) allowsExactly(a netip.Addr) bool {
	for _, c := range p.AllowCIDRs {
		if c.Bits() == a.BitLen() && c.Addr() == a {
			return true
		}
	}
	return false
}

// checkScheme permits https always and http under DevMode or AllowHTTP.
func (p Policy) checkScheme(scheme string) error {
	switch {
	case scheme == "https":
		return nil
	case scheme == "http" && (p.DevMode || p.AllowHTTP):
		return nil
	case scheme == "http":
		return &BlockedError{Reason: "plain http is not allowed; use https (or enable dev mode or the http allowlist)"}
	}
	return &BlockedError{Reason: fmt.Sprintf("scheme %q is not allowed; use https", scheme)}
}

// ValidateTargetURL checks a target or health URL against the policy before
// it is stored: an absolute https URL (http only if the policy allows it)
// with a host, no credentials and no fragment, whose host is not a literal
// address in a blocked range or a well-known local name (localhost,
// metadata.google.internal). It does not resolve DNS — names resolve
// differently from the API's pods and change over time — so the dial-time
// guard remains the authority. The error is a *BlockedError for a policy
// refusal, a plain error for a malformed URL.
func ValidateTargetURL(raw string, p Policy) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("invalid URL: %w", err)
	case !u.IsAbs() || u.Opaque != "":
		return errors.New("invalid URL: must be absolute, like https://host/path")
	case u.User != nil:
		return errors.New("invalid URL: must not carry credentials")
	case u.Fragment != "":
		return errors.New("invalid URL: must not have a fragment")
	case u.Hostname() == "":
		return errors.New("invalid URL: must name a host")
	}
	if err := p.checkScheme(u.Scheme); err != nil {
		return err
	}
	plainHTTP := u.Scheme == "http"
	check := func(a netip.Addr) error {
		if err := p.CheckAddr(a); err != nil {
			return err
		}
		if plainHTTP {
			return p.checkPlainHTTP(a)
		}
		return nil
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if a, err := netip.ParseAddr(host); err == nil {
		return check(a)
	}
	switch {
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return check(netip.MustParseAddr("127.0.0.1"))
	case host == "metadata.google.internal" || host == "metadata":
		return check(netip.MustParseAddr("169.254.169.254"))
	}
	// Some resolvers read "2130706433" or "0x7f.1" as an address; a real DNS
	// name never has an all-digit top-level label or a 0x label.
	if numericLooking(host) {
		return &BlockedError{Reason: fmt.Sprintf("host %q looks like an address in a non-standard form", host)}
	}
	return nil
}

func numericLooking(host string) bool {
	labels := strings.Split(host, ".")
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return true
	}
	for _, l := range labels {
		if len(l) > 2 && strings.HasPrefix(l, "0x") && strings.Trim(l[2:], "0123456789abcdef") == "" {
			return true
		}
	}
	return false
}

// ParseCIDRs parses an operator allowlist: prefixes or bare addresses
// (a /32 or /128), separated by commas or whitespace.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, fmt.Errorf("allowlist entry %q: %w", f, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("allowlist entry %q is neither a CIDR prefix nor an address", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
