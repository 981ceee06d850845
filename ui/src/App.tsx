import { useEffect, useState, useSyncExternalStore, type FormEvent } from "react";
import { auth, changes, get } from "./api";
import type { components } from "./api-types";
import { shouldSignInAgain, signIn, signOut } from "./signin";
import { useStreamConnected } from "./hooks";
import { NamespaceSwitcher, namespaceOf } from "./namespace";
import { Link, useLocation } from "./router";
import { Audit } from "./pages/Audit";
import { Bindings } from "./pages/Bindings";
import { Cluster } from "./pages/Cluster";
import { Deliveries, DeliveryDetail } from "./pages/Deliveries";
import { EndpointDetail, Endpoints } from "./pages/Endpoints";
import { Graph } from "./pages/Graph";
import { KindDetail, Kinds } from "./pages/Kinds";
import { ProviderConfigs } from "./pages/ProviderConfigs";
import { ResourceDetail } from "./pages/ResourceDetail";
import { Resources } from "./pages/Resources";

const nav: [string, string][] = [
  ["/resources", "Resources"],
  ["/graph", "Graph"],
  ["/kinds", "Kinds"],
  ["/providerconfigs", "Provider configs"],
  ["/bindings", "Reactor bindings"],
  ["/endpoints", "Endpoints"],
  ["/deliveries", "Deliveries"],
  ["/audit", "Audit"],
  ["/cluster", "Cluster"],
];

type Theme = "system" | "light" | "dark";
const themeKey = "converge.theme";

function useTheme(): [Theme, () => void] {
  const [theme, setTheme] = useState<Theme>(() => (localStorage.getItem(themeKey) as Theme) || "system");
  useEffect(() => {
    if (theme === "system") document.documentElement.removeAttribute("data-theme");
    else document.documentElement.setAttribute("data-theme", theme);
    localStorage.setItem(themeKey, theme);
  }, [theme]);
  const next = () => setTheme(theme === "system" ? "dark" : theme === "dark" ? "light" : "system");
  return [theme, next];
}

function page(parts: string[], search: URLSearchParams) {
  const [first, a, b] = parts;
  switch (first) {
    case undefined:
    case "resources":
      return a && b ? <ResourceDetail kind={a} name={b} /> : <Resources search={search} />;
    case "graph":
      return <Graph kind={a} name={b} />;
    case "kinds":
      return a && b ? <KindDetail kind={a} version={Number(b)} /> : <Kinds />;
    case "providerconfigs":
      return <ProviderConfigs />;
    case "bindings":
      return <Bindings />;
    case "endpoints":
      return a ? <EndpointDetail name={a} /> : <Endpoints />;
    case "cluster":
      return <Cluster />;
    case "deliveries":
      return a ? <DeliveryDetail id={a} /> : <Deliveries search={search} />;
    case "audit":
      return <Audit search={search} />;
  }
  return <p>No such page.</p>;
}

export function App() {
  const loc = useLocation();
  const [theme, nextTheme] = useTheme();
  const live = useStreamConnected();
  useSyncExternalStore(auth.subscribe, () => auth.version);
  const needToken = auth.needed;
  const me = useWhoAmI(auth.token);
  const parts = loc.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  const section = parts[0] ?? "resources";
  const ns = namespaceOf(loc.searchParams);
  useEffect(() => changes.follow(ns), [ns]);

  useEffect(() => {
    const title = nav.find(([p]) => p === `/${section}`)?.[1] ?? "Converge";
    document.title = `${title} · Converge`;
  }, [section]);

  return (
    <>
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="top">
        <Link to="/resources" className="brand">
          Converge
        </Link>
        <nav aria-label="Console">
          <ul>
            {nav.map(([path, label]) => (
              <li key={path}>
                <Link to={path} aria-current={`/${section}` === path ? "page" : undefined}>
                  {label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div className="top-right">
          <NamespaceSwitcher />
          <span className={`live ${live ? "on" : "off"}`} role="status" title={live ? "Live updates on" : "Live updates reconnecting"}>
            {live ? "live" : "offline"}
          </span>
          <button type="button" onClick={nextTheme} aria-label={`Theme: ${theme}. Switch theme`}>
            Theme: {theme}
          </button>
          {auth.token && me && (
            <span className="signed-in" data-testid="signed-in-as" title={me.groups?.length ? `Groups: ${me.groups.join(", ")}` : undefined}>
              {me.subject}
            </span>
          )}
          {auth.token && auth.kind === "oidc" && (
            <button type="button" onClick={signOut}>
              Sign out
            </button>
          )}
          {auth.token && auth.kind === "static" && (
            <button type="button" onClick={() => auth.set("")}>
              Forget token
            </button>
          )}
        </div>
      </header>
      {needToken && <TokenPrompt />}
      {/* Keyed by the namespace: a page shown in another one loads afresh. */}
      <main id="main" tabIndex={-1} key={ns}>
        {page(parts, loc.searchParams)}
      </main>
    </>
  );
}

type WhoAmI = components["schemas"]["WhoAmI"];

// useWhoAmI is who the server takes the holder of token to be (GET
// /auth/whoami), null without a token or until it answers.
function useWhoAmI(token: string): WhoAmI | null {
  const [me, setMe] = useState<WhoAmI | null>(null);
  useEffect(() => {
    setMe(null);
    if (!token) return;
    let live = true;
    get<WhoAmI>("/auth/whoami")
      .then((w) => live && setMe(w))
      .catch(() => undefined); // a 401 shows the prompt
    return () => {
      live = false;
    };
  }, [token]);
  return me;
}

// TokenPrompt asks for a way in once the API refused a request: with OIDC,
// it signs in again by itself (unless the user signed out, or the last
// sign-in was a minute ago: its token was refused at once), and offers a
// Sign in button beside the token field.
function TokenPrompt() {
  const [value, setValue] = useState("");
  const oidc = auth.oidc;
  const auto = !!oidc && shouldSignInAgain();
  useEffect(() => {
    if (oidc && auto) signIn(oidc).catch((e: unknown) => auth.fail(`Sign-in failed: ${e instanceof Error ? e.message : String(e)}`));
  }, [oidc, auto]);
  if (auto) return <p className="token-prompt" role="status">Signing in…</p>;
  const submit = (e: FormEvent) => {
    e.preventDefault();
    auth.set(value.trim());
    window.location.reload();
  };
  return (
    <div className="token-prompt" role="dialog" aria-modal="false" aria-labelledby="token-h">
      <form onSubmit={submit} className="card">
        <h2 id="token-h">{oidc ? "Sign in to this server" : "This server needs an API token"}</h2>
        {auth.reason && <p className="problem">{auth.reason}</p>}
        {oidc && (
          <p>
            <button type="button" onClick={() => void signIn(oidc).catch((e: unknown) => auth.fail(`Sign-in failed: ${e instanceof Error ? e.message : String(e)}`))}>
              Sign in with {new URL(oidc.issuer).host}
            </button>
          </p>
        )}
        <p>
          {oidc ? "Or enter an API token: a" : "Enter a"} read token to browse, or an admin token to change things. It is kept for this tab only.
        </p>
        <label>
          Token{" "}
          <input type="password" autoFocus value={value} onChange={(e) => setValue(e.target.value)} autoComplete="off" required />
        </label>{" "}
        <button type="submit">Use token</button>
      </form>
    </div>
  );
}
