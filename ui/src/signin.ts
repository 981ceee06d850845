// Sign-in with OIDC: the authorization-code flow with PKCE (RFC 7636, S256)
// against the issuer GET /api/v1/auth/config names. It is the Web Crypto
// API and two fetches, so the console takes no OAuth library for it: the
// random values come from crypto.getRandomValues, the code challenge from
// crypto.subtle.digest (a secure context: https, or http on localhost).
//
// The flow: signIn keeps a state, a nonce and the code verifier in
// sessionStorage and sends the tab to the issuer's authorization endpoint;
// the issuer sends it back to the console's root with a code, and
// completeSignIn (run before the app renders) checks the state, exchanges
// the code and the verifier at the token endpoint, checks the ID token's
// nonce, and keeps the token the config names for this tab (auth.set).

import { auth, type OIDCSignIn } from "./api";

const pendingKey = "converge.signin";
const signedOutKey = "converge.signedOut";
const signedInAtKey = "converge.signedInAt";

interface Pending {
  state: string;
  nonce: string;
  verifier: string;
  returnTo: string;
  tokenURL: string;
  redirectURI: string;
  clientID: string;
  token: OIDCSignIn["token"];
}

function base64url(bytes: Uint8Array): string {
  let s = "";
  bytes.forEach((b) => (s += String.fromCharCode(b)));
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

const random = () => base64url(crypto.getRandomValues(new Uint8Array(32)));

async function challengeOf(verifier: string): Promise<string> {
  return base64url(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier))));
}

// The console's redirect URI: its root, which serves the app (register it
// with the provider).
const redirectURI = () => `${window.location.origin}/`;

async function discover(issuer: string): Promise<{ authorization_endpoint: string; token_endpoint: string }> {
  const resp = await fetch(`${issuer.replace(/\/$/, "")}/.well-known/openid-configuration`);
  if (!resp.ok) throw new Error(`the issuer's discovery document answered ${resp.status}`);
  return resp.json();
}

// signIn sends the tab to the issuer to sign in; it comes back to the
// page it is on.
export async function signIn(cfg: OIDCSignIn): Promise<void> {
  sessionStorage.removeItem(signedOutKey);
  const d = await discover(cfg.issuer);
  const p: Pending = {
    state: random(),
    nonce: random(),
    verifier: random(),
    returnTo: window.location.pathname + window.location.search,
    tokenURL: d.token_endpoint,
    redirectURI: redirectURI(),
    clientID: cfg.client_id,
    token: cfg.token,
  };
  sessionStorage.setItem(pendingKey, JSON.stringify(p));
  const u = new URL(d.authorization_endpoint);
  u.searchParams.set("response_type", "code");
  u.searchParams.set("client_id", cfg.client_id);
  u.searchParams.set("redirect_uri", p.redirectURI);
  u.searchParams.set("scope", (cfg.scopes ?? ["openid"]).join(" "));
  u.searchParams.set("state", p.state);
  u.searchParams.set("nonce", p.nonce);
  u.searchParams.set("code_challenge", await challengeOf(p.verifier));
  u.searchParams.set("code_challenge_method", "S256");
  window.location.assign(u.toString());
}

// payload decodes a JWT's claims, unverified: the console reads its own ID
// token's nonce; the API verifies every token it is sent.
function payload(jwt: string): Record<string, unknown> {
  const part = jwt.split(".")[1] ?? "";
  const b64 = part.replace(/-/g, "+").replace(/_/g, "/");
  return JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))));
}

// completeSignIn finishes a sign-in the issuer sent the tab back from, if
// it did; it throws why a sign-in failed.
export async function completeSignIn(): Promise<void> {
  const q = new URLSearchParams(window.location.search);
  const raw = sessionStorage.getItem(pendingKey);
  if (!raw || !q.has("state") || !(q.has("code") || q.has("error"))) return;
  sessionStorage.removeItem(pendingKey);
  const p = JSON.parse(raw) as Pending;
  history.replaceState(null, "", p.returnTo);
  if (q.get("state") !== p.state) throw new Error("the sign-in answer is not for this tab's request (state differs)");
  if (q.has("error")) throw new Error(`the identity provider refused the sign-in: ${q.get("error_description") ?? q.get("error")}`);
  const resp = await fetch(p.tokenURL, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code: q.get("code") ?? "",
      redirect_uri: p.redirectURI,
      client_id: p.clientID,
      code_verifier: p.verifier,
    }),
  });
  const body = (await resp.json().catch(() => ({}))) as Record<string, string>;
  if (!resp.ok) throw new Error(`the token endpoint refused the code: ${body.error_description ?? body.error ?? resp.status}`);
  const idToken = body.id_token;
  if (idToken && payload(idToken).nonce !== p.nonce) throw new Error("the ID token's nonce is not this sign-in's");
  const token = body[p.token];
  if (!token) throw new Error(`the token endpoint's answer has no ${p.token}`);
  sessionStorage.setItem(signedInAtKey, String(Date.now()));
  auth.set(token, "oidc");
}

// signOut forgets the token; the console then offers to sign in again
// rather than doing it by itself.
export function signOut() {
  sessionStorage.setItem(signedOutKey, "1");
  auth.set("");
  auth.refuse();
}

// shouldSignInAgain says whether a refused request should send the tab to
// sign in by itself: not after the user signed out, and not within a
// minute of the last sign-in (a token the API refuses at once would
// otherwise loop through the issuer).
export function shouldSignInAgain(): boolean {
  if (sessionStorage.getItem(signedOutKey)) return false;
  const at = Number(sessionStorage.getItem(signedInAtKey) ?? 0);
  return Date.now() - at > 60_000;
}
