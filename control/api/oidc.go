package api

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// OIDCConfig makes the API accept OIDC bearer tokens (JWTs an identity
// provider signs) beside the static tokens.
type OIDCConfig struct {
	// IssuerURL is the issuer: its discovery document is at
	// IssuerURL/.well-known/openid-configuration and a token's iss must
	// equal it. Required.
	IssuerURL string
	// Audience must be among a token's aud. Required.
	Audience string
	// ClientID is the OAuth client the console signs in as. Defaults to
	// Audience.
	ClientID string
	// Scopes are what the console asks for. Defaults to openid, profile
	// and email.
	Scopes []string
	// UsernameClaim is the claim naming the caller (Principal.Subject).
	// Defaults to "sub".
	UsernameClaim string
	// GroupsClaim is the claim holding the caller's groups, a string or an
	// array of strings; a token without it has no groups. Defaults to
	// "groups".
	GroupsClaim string
	// ClockSkew is how far exp, nbf and iat may be off: a token is
	// accepted until exp + ClockSkew, and from nbf (or iat) - ClockSkew.
	// Defaults to 60 seconds; negative is refused.
	ClockSkew time.Duration
	// HTTPClient fetches the discovery document and the keys. Nil uses
	// http.DefaultClient with a 10-second timeout.
	HTTPClient *http.Client
}

// The OIDCConfig defaults.
const (
	OIDCUsernameClaimDefault = "sub"
	OIDCGroupsClaimDefault   = "groups"
	OIDCClockSkewDefault     = 60 * time.Second
	// oidcRetryInterval spaces attempts at the discovery document while the
	// issuer cannot be reached: requests in between are answered at once.
	oidcRetryInterval = 5 * time.Second
	oidcFetchTimeout  = 10 * time.Second
	oidcPageWait      = 2 * time.Second
)

// OIDCScopesDefault are OIDCConfig.Scopes' default.
func OIDCScopesDefault() []string { return []string{"openid", "profile", "email"} }

func (c OIDCConfig) withDefaults() OIDCConfig {
	c.ClientID = cmp.Or(c.ClientID, c.Audience)
	if len(c.Scopes) == 0 {
		c.Scopes = OIDCScopesDefault()
	}
	c.UsernameClaim = cmp.Or(c.UsernameClaim, OIDCUsernameClaimDefault)
	c.GroupsClaim = cmp.Or(c.GroupsClaim, OIDCGroupsClaimDefault)
	c.ClockSkew = cmp.Or(c.ClockSkew, OIDCClockSkewDefault)
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: oidcFetchTimeout}
	}
	return c
}

func (c OIDCConfig) validate() error {
	u, err := url.Parse(c.IssuerURL)
	switch {
	case c.IssuerURL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return fmt.Errorf("api: OIDC.IssuerURL must be an absolute http(s) URL (got %q)", c.IssuerURL)
	case c.Audience == "":
		return errors.New("api: OIDC.Audience is required")
	case c.ClockSkew < 0:
		return fmt.Errorf("api: OIDC.ClockSkew must not be negative (got %s)", c.ClockSkew)
	}
	return nil
}

// oidcVerifier verifies OIDC bearer tokens. It finds the issuer's keys
// through discovery on first need, not at start: a server whose issuer is
// briefly unreachable still starts (static tokens work), retries discovery
// at most every oidcRetryInterval, and reports it in readiness (check).
// One discovery runs at a time, in its own goroutine, bounded by
// oidcFetchTimeout; callers wait for it only as long as their context
// lets them. go-oidc's remote key set refetches the issuer's keys when a
// token names a key it has not seen, which is how a rotation is taken up.
type oidcVerifier struct {
	cfg OIDCConfig

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	tokenURL string        // the discovered token endpoint
	tried    time.Time     // the last discovery's start
	err      error         // the last discovery's failure
	running  chan struct{} // closed when the discovery in flight ends; nil when none is
}

func newOIDCVerifier(cfg OIDCConfig) *oidcVerifier {
	return &oidcVerifier{cfg: cfg.withDefaults()}
}

// errIssuerUnreachable is the cause of a token that could not be checked
// because the issuer's discovery document or keys could not be fetched.
var errIssuerUnreachable = errors.New("the OIDC issuer cannot be reached to check the token")

// discover returns the verifier. Until discovery has succeeded it starts
// one if none runs and the last began oidcRetryInterval ago or more, and
// waits for the one in flight until ctx ends.
func (o *oidcVerifier) discover(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	if o.verifier != nil {
		defer o.mu.Unlock()
		return o.verifier, nil
	}
	if o.running == nil && (o.tried.IsZero() || time.Since(o.tried) >= oidcRetryInterval) {
		o.tried = time.Now()
		o.running = make(chan struct{})
		go o.run(o.running)
	}
	running, err := o.running, o.err
	o.mu.Unlock()
	if running == nil {
		return nil, err
	}
	select {
	case <-running:
	case <-ctx.Done():
		return nil, errors.New("discovery did not finish in time")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.verifier != nil {
		return o.verifier, nil
	}
	return nil, o.err
}

// run fetches the discovery document and closes done.
func (o *oidcVerifier) run(done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(oidc.ClientContext(context.Background(), o.cfg.HTTPClient), oidcFetchTimeout)
	defer cancel()
	p, err := oidc.NewProvider(ctx, o.cfg.IssuerURL)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.running = nil
	if err != nil {
		o.err = fmt.Errorf("discovery at %s failed: %w", o.cfg.IssuerURL, err)
		return
	}
	// Issuer, audience and times are checked by verify, which says which
	// failed; go-oidc checks the signature against the issuer's keys.
	o.verifier = p.VerifierContext(oidc.ClientContext(context.Background(), o.cfg.HTTPClient),
		&oidc.Config{SkipClientIDCheck: true, SkipIssuerCheck: true, SkipExpiryCheck: true})
	o.tokenURL = p.Endpoint().TokenURL
	o.err = nil
}

// connectSources are the origins the console's page must reach to sign in:
// the issuer's (discovery) and, once discovered, the token endpoint's
// (Cognito's, for one, is on another host). It waits for discovery at most
// oidcPageWait, so an issuer that does not answer holds a page no longer.
func (o *oidcVerifier) connectSources(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, oidcPageWait)
	defer cancel()
	_, _ = o.discover(ctx) // without it, the issuer's origin alone
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, raw := range []string{o.cfg.IssuerURL, o.tokenURL} {
		if u, err := url.Parse(raw); err == nil && u.Host != "" {
			if origin := u.Scheme + "://" + u.Host; !slices.Contains(out, origin) {
				out = append(out, origin)
			}
		}
	}
	return out
}

// check is the readiness check: nil once discovery succeeded.
func (o *oidcVerifier) check(ctx context.Context) error {
	if _, err := o.discover(ctx); err != nil {
		return errors.New("the issuer's discovery document could not be fetched yet; OIDC tokens are refused with 503 until it is")
	}
	return nil
}

// tokenError is why a token was refused: its description is the
// error_description of the 401's challenge and the problem's detail, and
// names no internals.
type tokenError struct{ description string }

func (e *tokenError) Error() string { return e.description }

// verify checks token and returns the caller it names. A refusal is a
// *tokenError; errIssuerUnreachable when the keys could not be had.
func (o *oidcVerifier) verify(ctx context.Context, token string) (Principal, error) {
	v, err := o.discover(ctx)
	if err != nil {
		return Principal{}, errIssuerUnreachable
	}
	idt, err := v.Verify(ctx, token)
	if err != nil {
		// go-oidc's errors are text (its key set's fetch error is wrapped
		// with %v): these two phrases are its own.
		switch msg := err.Error(); {
		case strings.Contains(msg, "malformed jwt"):
			return Principal{}, &tokenError{"the token is not a well-formed signed JWT"}
		case strings.Contains(msg, "fetching keys"):
			return Principal{}, errIssuerUnreachable
		}
		return Principal{}, &tokenError{"the token's signature does not verify with the issuer's keys"}
	}
	if idt.Issuer != o.cfg.IssuerURL {
		return Principal{}, &tokenError{"the token was not issued by the configured issuer"}
	}
	if !slices.Contains(idt.Audience, o.cfg.Audience) {
		return Principal{}, &tokenError{"the token's audience does not include this API"}
	}
	var claims map[string]json.RawMessage
	if err := idt.Claims(&claims); err != nil {
		return Principal{}, &tokenError{"the token's claims are not a JSON object"}
	}
	if err := o.checkTimes(claims); err != nil {
		return Principal{}, err
	}
	var subject string
	if json.Unmarshal(claims[o.cfg.UsernameClaim], &subject) != nil || subject == "" {
		return Principal{}, &tokenError{"the token has no " + o.cfg.UsernameClaim + " claim (a non-empty string) to name its caller"}
	}
	if reservedSubject(subject) {
		// A user named token:admin-0 would pass for that token in the
		// audit trail and in role bindings.
		return Principal{}, &tokenError{"the token's " + o.cfg.UsernameClaim + " claim names a subject reserved for static tokens and anonymous callers"}
	}
	groups, err := groupsOf(claims[o.cfg.GroupsClaim])
	if err != nil {
		return Principal{}, &tokenError{"the token's " + o.cfg.GroupsClaim + " claim is neither a string nor an array of strings"}
	}
	return Principal{Subject: subject, Groups: groups}, nil
}

// checkTimes checks exp (required), nbf and iat against now, each with
// ClockSkew of leeway.
func (o *oidcVerifier) checkTimes(claims map[string]json.RawMessage) error {
	now, skew := time.Now(), o.cfg.ClockSkew
	at := func(name string) (time.Time, bool, error) {
		raw, ok := claims[name]
		if !ok || string(raw) == "null" {
			return time.Time{}, false, nil
		}
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return time.Time{}, false, &tokenError{"the token's " + name + " claim is not a number"}
		}
		f, err := n.Float64()
		if err != nil {
			return time.Time{}, false, &tokenError{"the token's " + name + " claim is not a number"}
		}
		return time.Unix(0, 0).Add(time.Duration(f * float64(time.Second))), true, nil
	}
	exp, ok, err := at("exp")
	switch {
	case err != nil:
		return err
	case !ok:
		return &tokenError{"the token has no exp claim"}
	case now.After(exp.Add(skew)):
		return &tokenError{"the token has expired"}
	}
	for _, name := range []string{"nbf", "iat"} {
		t, ok, err := at(name)
		if err != nil {
			return err
		}
		if ok && now.Add(skew).Before(t) {
			return &tokenError{"the token is not valid yet (its " + name + " is in the future)"}
		}
	}
	return nil
}

// reservedSubject says whether subject is one the server gives callers
// other than OIDC users: "token:<name>" and "anonymous".
func reservedSubject(subject string) bool {
	return strings.HasPrefix(subject, "token:") || subject == "anonymous"
}

// groupsOf reads a groups claim: absent, a string, or an array of strings.
func groupsOf(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, err
	}
	return many, nil
}

// looksLikeJWT says whether a bearer token has a JWT's shape (three
// base64url parts, the first a JSON header): such a token is verified as
// OIDC, anything else compared with the static tokens.
func looksLikeJWT(token string) bool {
	head, rest, ok := strings.Cut(token, ".")
	if !ok || strings.Count(rest, ".") != 1 {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	return json.Unmarshal(b, &h) == nil && h.Alg != ""
}
