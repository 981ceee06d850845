import { useEffect, useState, useSyncExternalStore, type FormEvent } from "react";
import { auth, changes } from "./api";
import { useStreamConnected } from "./hooks";
import { NamespaceSwitcher, namespaceOf } from "./namespace";
import { Link, useLocation } from "./router";
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
  }
  return <p>No such page.</p>;
}

export function App() {
  const loc = useLocation();
  const [theme, nextTheme] = useTheme();
  const live = useStreamConnected();
  const needToken = useSyncExternalStore(auth.subscribe, () => auth.needed);
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
          {auth.token && (
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

function TokenPrompt() {
  const [value, setValue] = useState("");
  const submit = (e: FormEvent) => {
    e.preventDefault();
    auth.set(value.trim());
    window.location.reload();
  };
  return (
    <div className="token-prompt" role="dialog" aria-modal="false" aria-labelledby="token-h">
      <form onSubmit={submit} className="card">
        <h2 id="token-h">This server needs an API token</h2>
        <p>Enter a read token to browse, or an admin token to change things. It is kept for this tab only.</p>
        <label>
          Token{" "}
          <input type="password" autoFocus value={value} onChange={(e) => setValue(e.target.value)} autoComplete="off" required />
        </label>{" "}
        <button type="submit">Use token</button>
      </form>
    </div>
  );
}
