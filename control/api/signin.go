package api

import (
	"context"
	"net/http"
	"reflect"

	"github.com/convergeplane/converge/control/store"

	"github.com/danielgtaylor/huma/v2"
)

// authConfigPath is the one route under Prefix that takes no token.
const authConfigPath = "/auth/config"

// AuthConfig is the body of GET /api/v1/auth/config.
type AuthConfig struct {
	OIDC *OIDCSignIn `json:"oidc"`
}

// Schema documents AuthConfig: huma cannot mark a struct field nullable,
// and oidc is an OIDCSignIn or null.
func (AuthConfig) Schema(r huma.Registry) *huma.Schema {
	return &huma.Schema{Type: huma.TypeObject, Required: []string{"oidc"}, AdditionalProperties: false,
		Properties: map[string]*huma.Schema{"oidc": {
			Description: "How to sign in with OIDC; null when the server takes no OIDC tokens (static tokens only, or no authentication).",
			OneOf:       []*huma.Schema{r.Schema(reflect.TypeFor[OIDCSignIn](), true, "OIDCSignIn"), {Type: "null"}},
		}}}
}

// OIDCSignIn is how a client (the console) signs in: the authorization-code
// flow with PKCE at Issuer's authorization endpoint, as ClientID, asking
// for Scopes, then sending the token Token names as its bearer token.
type OIDCSignIn struct {
	Issuer   string   `json:"issuer" doc:"The issuer URL (OIDC_ISSUER_URL); its discovery document is at issuer/.well-known/openid-configuration." example:"https://idp.example.com/realms/converge"`
	ClientID string   `json:"client_id" doc:"The OAuth client to sign in as (OIDC_CONSOLE_CLIENT_ID)." example:"converge"`
	Scopes   []string `json:"scopes" doc:"The scopes to ask for (OIDC_CONSOLE_SCOPES)." example:"[\"openid\",\"profile\",\"email\"]"`
	Token    string   `json:"token" enum:"id_token,access_token" doc:"Which token of the token endpoint's answer to send: the ID token when client_id is the API's audience (OIDC_AUDIENCE), else the access token, whose audience the provider sets from the scopes."`
}

// WhoAmI is the body of GET /api/v1/auth/whoami: the caller as the API sees
// it.
type WhoAmI struct {
	Subject   string   `json:"subject" doc:"Who is calling: the OIDC token's username claim (OIDC_USERNAME_CLAIM), token:<name> for a static token, or anonymous." example:"alice@example.com"`
	Groups    []string `json:"groups" doc:"The caller's groups (OIDC_GROUPS_CLAIM); empty for a static token."`
	TokenName string   `json:"token_name,omitempty" doc:"The static token used, by list and position (admin-0, read-1); absent for other callers." example:"admin-0"`
	Anonymous bool     `json:"anonymous" doc:"True when the server has no authentication configured: every caller is anonymous."`
	// Bindings are the role bindings that name the caller or one of its
	// groups.
	Bindings []store.RoleBinding `json:"bindings" doc:"The role bindings naming the caller or one of its groups; empty for static tokens and the anonymous caller, whose roles need none (a static admin token and an open API: admin cluster-wide; a read token: viewer cluster-wide)."`
}

func (s *Server) registerAuth() {
	register(s, huma.Operation{
		OperationID: "get-auth-config", Method: http.MethodGet, Path: authConfigPath, Tags: []string{"Auth"},
		Summary:     "How to sign in",
		Description: "Whether the server takes OIDC tokens and, if so, how a client signs in for one. Needs no token.",
	}, nil, func(context.Context, *struct{}) (*bodyOutput[AuthConfig], error) {
		var out AuthConfig
		if o := s.auth.oidc; o != nil {
			token := "access_token"
			if o.cfg.ClientID == o.cfg.Audience {
				token = "id_token"
			}
			out.OIDC = &OIDCSignIn{Issuer: o.cfg.IssuerURL, ClientID: o.cfg.ClientID, Scopes: o.cfg.Scopes, Token: token}
		}
		return &bodyOutput[AuthConfig]{Body: out}, nil
	})
	register(s, huma.Operation{
		OperationID: "get-whoami", Method: http.MethodGet, Path: "/auth/whoami", Tags: []string{"Auth"},
		Summary:     "Who is calling",
		Description: "The caller as the server sees it: the subject and groups of an OIDC token, the name of a static token, or anonymous; and the role bindings that name it.",
	}, nil, func(ctx context.Context, _ *struct{}) (*bodyOutput[WhoAmI], error) {
		p := PrincipalFrom(ctx)
		bindings, err := s.RoleBindingsOf(ctx)
		if err != nil {
			return nil, s.problemFor(ctx, err, problemOpts{})
		}
		out := WhoAmI{Subject: p.Subject, Groups: p.Groups, TokenName: p.TokenName, Anonymous: p.Anonymous, Bindings: bindings}
		if out.Groups == nil {
			out.Groups = []string{}
		}
		return &bodyOutput[WhoAmI]{Body: out}, nil
	})
}
