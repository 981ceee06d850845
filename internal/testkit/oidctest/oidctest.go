// Package oidctest is an OpenID Connect issuer for tests: an httptest
// server with a discovery document, a JWKS of its own keys (RSA or EC),
// key rotation (add a key, retire an old one), tokens minted with any
// claims, and the authorization-code flow with PKCE (an authorize endpoint
// that approves a configured user at once and a token endpoint that checks
// the S256 code_verifier), so a browser can sign in against it.
//
// It is a test double, not an identity provider: it authenticates no one,
// accepts any client and any redirect URI, and keeps everything in memory.
package oidctest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Options configures an Issuer.
type Options struct {
	// TLS serves https with httptest's certificate (Client trusts it);
	// false serves plain http.
	TLS bool
	// Audience is the aud of the tokens Claims builds and of the access
	// tokens the token endpoint issues. Defaults to "converge".
	Audience string
	// User is the claims of the user the authorize endpoint signs in; its
	// tokens add iss, aud, iat, exp (and the ID token nonce). Defaults to
	// {"sub": "alice", "groups": ["team-a"]}.
	User map[string]any
	// TokenTTL is the lifetime of the tokens the token endpoint issues.
	// Defaults to an hour.
	TokenTTL time.Duration
}

// Issuer is a running test issuer. Its methods are safe for concurrent use.
type Issuer struct {
	t    testing.TB
	srv  *httptest.Server
	opts Options

	mu        sync.Mutex
	keys      []key // published, oldest first; the last one signs
	codes     map[string]grant
	available bool
	jwksFetch int
}

type key struct {
	id     string
	alg    jose.SignatureAlgorithm
	signer crypto.Signer
}

// grant is an authorization code's pending exchange.
type grant struct {
	clientID, redirectURI, challenge, nonce string
}

// New starts an issuer, stopped when the test ends, with one RSA key.
func New(t testing.TB, opts Options) *Issuer {
	t.Helper()
	if opts.Audience == "" {
		opts.Audience = "converge"
	}
	if opts.User == nil {
		opts.User = map[string]any{"sub": "alice", "groups": []string{"team-a"}}
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = time.Hour
	}
	is := &Issuer{t: t, opts: opts, codes: map[string]grant{}, available: true}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", is.discovery)
	mux.HandleFunc("GET /jwks", is.jwks)
	mux.HandleFunc("GET /authorize", is.authorize)
	mux.HandleFunc("POST /token", is.token)
	mux.HandleFunc("OPTIONS /", func(http.ResponseWriter, *http.Request) {})
	h := cors(mux)
	if opts.TLS {
		is.srv = httptest.NewTLSServer(h)
	} else {
		is.srv = httptest.NewServer(h)
	}
	t.Cleanup(is.srv.Close)
	is.AddKey(jose.RS256)
	return is
}

// cors lets a page of any origin read the discovery document and call the
// token endpoint, as identity providers let single-page apps.
func cors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Headers", "Content-Type, Authorization")
		w.Header().Set("Access-Control-Allow-Methods", "GET, POST")
		h.ServeHTTP(w, r)
	})
}

// URL is the issuer URL (its iss), with no trailing slash.
func (is *Issuer) URL() string { return is.srv.URL }

// Client is an HTTP client that trusts the issuer's certificate.
func (is *Issuer) Client() *http.Client { return is.srv.Client() }

// Audience is the audience of the tokens Claims builds.
func (is *Issuer) Audience() string { return is.opts.Audience }

// SetAvailable makes discovery and the JWKS answer 503 (false) or serve
// again (true), as an issuer that is briefly unreachable.
func (is *Issuer) SetAvailable(up bool) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.available = up
}

// JWKSFetches is how many times the JWKS has been served.
func (is *Issuer) JWKSFetches() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.jwksFetch
}

// AddKey generates a key for alg (RS256, or ES256), publishes it and makes
// it the signing key; it returns its kid. The older keys stay published
// until retired.
func (is *Issuer) AddKey(alg jose.SignatureAlgorithm) string {
	is.t.Helper()
	var s crypto.Signer
	var err error
	switch alg {
	case jose.RS256:
		s, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		s, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		is.t.Fatalf("oidctest: no key for %s", alg)
	}
	if err != nil {
		is.t.Fatal(err)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	k := key{id: "key-" + strconv.Itoa(len(is.keys)+1) + "-" + string(alg), alg: alg, signer: s}
	is.keys = append(is.keys, k)
	return k.id
}

// Rotate adds a new key of the signing key's algorithm and retires every
// other one: the JWKS then publishes the new key alone. It returns the new
// kid.
func (is *Issuer) Rotate() string {
	is.t.Helper()
	kid := is.AddKey(is.signingKey().alg)
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = is.keys[len(is.keys)-1:]
	return kid
}

// Retire stops publishing key kid; tokens it signed then fail to verify.
func (is *Issuer) Retire(kid string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = slices.DeleteFunc(is.keys, func(k key) bool { return k.id == kid })
}

// KeyIDs are the published kids, oldest first; the last one signs.
func (is *Issuer) KeyIDs() []string {
	is.mu.Lock()
	defer is.mu.Unlock()
	ids := make([]string, len(is.keys))
	for i, k := range is.keys {
		ids[i] = k.id
	}
	return ids
}

func (is *Issuer) signingKey() key {
	is.mu.Lock()
	defer is.mu.Unlock()
	if len(is.keys) == 0 {
		is.t.Fatal("oidctest: every key is retired")
	}
	return is.keys[len(is.keys)-1]
}

// Claims returns the claims of a valid token for subject: iss, aud, sub,
// iat now and exp in an hour. Change or add any before signing.
func (is *Issuer) Claims(subject string) map[string]any {
	now := time.Now()
	return map[string]any{"iss": is.URL(), "aud": is.opts.Audience, "sub": subject,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

// Sign returns a JWT of claims signed by the signing key.
func (is *Issuer) Sign(claims map[string]any) string {
	is.t.Helper()
	return is.sign(is.signingKey(), claims)
}

// SignWith returns a JWT of claims signed by key kid, published or not
// (retired keys are kept for this).
func (is *Issuer) SignWith(kid string, k crypto.Signer, claims map[string]any) string {
	is.t.Helper()
	return is.sign(key{id: kid, alg: algOf(k), signer: k}, claims)
}

// Forge returns a JWT of claims that names the signing key's kid but is
// signed by another key: its signature does not verify.
func (is *Issuer) Forge(claims map[string]any) string {
	is.t.Helper()
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		is.t.Fatal(err)
	}
	return is.SignWith(is.signingKey().id, other, claims)
}

// Signer returns key kid's private key, to sign with it after it is
// retired (SignWith).
func (is *Issuer) Signer(kid string) crypto.Signer {
	is.mu.Lock()
	defer is.mu.Unlock()
	for _, k := range is.keys {
		if k.id == kid {
			return k.signer
		}
	}
	is.t.Fatalf("oidctest: no key %s", kid)
	return nil
}

func algOf(s crypto.Signer) jose.SignatureAlgorithm {
	if _, ok := s.(*ecdsa.PrivateKey); ok {
		return jose.ES256
	}
	return jose.RS256
}

func (is *Issuer) sign(k key, claims map[string]any) string {
	is.t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.signer, KeyID: k.id}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		is.t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		is.t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		is.t.Fatal(err)
	}
	s, err := jws.CompactSerialize()
	if err != nil {
		is.t.Fatal(err)
	}
	return s
}

func (is *Issuer) up(w http.ResponseWriter) bool {
	is.mu.Lock()
	defer is.mu.Unlock()
	if !is.available {
		http.Error(w, "the test issuer is down", http.StatusServiceUnavailable)
	}
	return is.available
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v) // the client left
}

func (is *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	if !is.up(w) {
		return
	}
	writeJSON(w, map[string]any{
		"issuer":                                is.URL(),
		"authorization_endpoint":                is.URL() + "/authorize",
		"token_endpoint":                        is.URL() + "/token",
		"jwks_uri":                              is.URL() + "/jwks",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		"code_challenge_methods_supported":      []string{"S256"},
		"grant_types_supported":                 []string{"authorization_code"},
		"scopes_supported":                      []string{"openid", "profile", "email", "groups"},
	})
}

func (is *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	if !is.up(w) {
		return
	}
	is.mu.Lock()
	is.jwksFetch++
	set := jose.JSONWebKeySet{}
	for _, k := range is.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.signer.Public(), KeyID: k.id, Algorithm: string(k.alg), Use: "sig"})
	}
	is.mu.Unlock()
	writeJSON(w, set)
}

// authorize approves the configured user at once and redirects back with
// a code, as a provider does for a user already signed in there.
func (is *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	redirect, err := url.Parse(q.Get("redirect_uri"))
	switch {
	case q.Get("redirect_uri") == "" || err != nil || !redirect.IsAbs():
		http.Error(w, "redirect_uri must be an absolute URL", http.StatusBadRequest)
		return
	case q.Get("response_type") != "code" || q.Get("client_id") == "":
		http.Error(w, "response_type must be code, with a client_id", http.StatusBadRequest)
		return
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		http.Error(w, "PKCE is required: code_challenge with code_challenge_method=S256", http.StatusBadRequest)
		return
	}
	code := random()
	is.mu.Lock()
	is.codes[code] = grant{clientID: q.Get("client_id"), redirectURI: q.Get("redirect_uri"),
		challenge: q.Get("code_challenge"), nonce: q.Get("nonce")}
	is.mu.Unlock()
	back := redirect.Query()
	back.Set("code", code)
	if s := q.Get("state"); s != "" {
		back.Set("state", s)
	}
	redirect.RawQuery = back.Encode()
	http.Redirect(w, r, redirect.String(), http.StatusFound)
}

// token exchanges a code, once, for an ID token (aud: the client) and an
// access token (aud: Options.Audience), checking the PKCE verifier.
func (is *Issuer) token(w http.ResponseWriter, r *http.Request) {
	fail := func(code, why string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": why})
	}
	if err := r.ParseForm(); err != nil {
		fail("invalid_request", "the body is not a form")
		return
	}
	f := r.PostForm
	if f.Get("grant_type") != "authorization_code" {
		fail("unsupported_grant_type", "only authorization_code")
		return
	}
	is.mu.Lock()
	g, ok := is.codes[f.Get("code")]
	delete(is.codes, f.Get("code"))
	is.mu.Unlock()
	sum := sha256.Sum256([]byte(f.Get("code_verifier")))
	switch {
	case !ok:
		fail("invalid_grant", "unknown or used code")
		return
	case g.clientID != f.Get("client_id") || g.redirectURI != f.Get("redirect_uri"):
		fail("invalid_grant", "client_id or redirect_uri differ from the authorization request's")
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		fail("invalid_grant", "code_verifier does not match code_challenge")
		return
	}
	now := time.Now()
	claims := func(aud string) map[string]any {
		c := maps.Clone(is.opts.User)
		c["iss"], c["aud"], c["iat"], c["exp"] = is.URL(), aud, now.Unix(), now.Add(is.opts.TokenTTL).Unix()
		return c
	}
	id := claims(g.clientID)
	if g.nonce != "" {
		id["nonce"] = g.nonce
	}
	writeJSON(w, map[string]any{"token_type": "Bearer", "expires_in": int(is.opts.TokenTTL.Seconds()),
		"id_token": is.Sign(id), "access_token": is.Sign(claims(is.opts.Audience))})
}

func random() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return fmt.Sprintf("%x", b)
}
