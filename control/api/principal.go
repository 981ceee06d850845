package api

import "context"

// Principal is who made a request, as the auth middleware established it:
// the subject the audit trail records and role bindings name, the groups a
// binding may name instead, and the static token's name when a token was
// used. With no authentication configured every request is Anonymous.
type Principal struct {
	// Subject identifies the caller: an OIDC token's username claim
	// (OIDC_USERNAME_CLAIM, default sub; never "anonymous" nor
	// "token:..."), or "token:<name>" for a static token, or "anonymous".
	Subject string
	// Groups are the caller's groups (an OIDC claim); static tokens have none.
	Groups []string
	// TokenName names the static token used ("admin-0", "read-1", ...); empty
	// for other callers.
	TokenName string
	// Anonymous is true when the API has no authentication configured.
	Anonymous bool
}

type principalKey struct{}

// withPrincipal returns ctx carrying p.
func withPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal the auth middleware put in ctx, or an
// anonymous one.
func PrincipalFrom(ctx context.Context) Principal {
	if p, ok := ctx.Value(principalKey{}).(Principal); ok {
		return p
	}
	return Principal{Subject: "anonymous", Anonymous: true}
}
