// The namespace the console shows, kept in the URL's query (?ns=NAME, or
// ?ns=* for every namespace; none means "default"), so that a view is a
// link. Every API call to namespaced objects carries it (api.ts), links
// keep it (router.tsx), and the header's switcher changes it.

import { useEffect, useState } from "react";
import { get } from "./api";
import { navigate, useLocation } from "./router";
import type { NamespaceList } from "./types";

export const defaultNamespace = "default";
export const allNamespaces = "*";

// The first segments of the API paths of namespaced objects (the rest —
// kinds, cluster members, alert sinks, namespaces — are cluster-wide).
const namespacedCollections = ["resources", "providerconfigs", "reactor-bindings", "endpoints", "deliveries"];

// namespaceOf is the namespace a URL query names: its ns, else "default".
export function namespaceOf(search: URLSearchParams): string {
  return search.get("ns") || defaultNamespace;
}

// currentNamespace is the namespace of the page shown.
export function currentNamespace(): string {
  return namespaceOf(new URLSearchParams(window.location.search));
}

// useNamespace is the namespace of the page shown, re-rendering when the
// URL changes.
export function useNamespace(): string {
  return namespaceOf(useLocation().searchParams);
}

// inNamespace adds the shown namespace to an API path (relative to
// /api/v1) of namespaced objects that names none. The default namespace,
// the server's own, is not named: a call in it is the call of a console
// without namespaces.
export function inNamespace(path: string): string {
  const ns = currentNamespace();
  const [p, q = ""] = path.split("?", 2);
  const first = p.split("/")[1]?.split(":")[0] ?? "";
  if (ns === defaultNamespace || !namespacedCollections.includes(first)) return path;
  const query = new URLSearchParams(q);
  if (query.has("namespace")) return path;
  query.set("namespace", ns);
  return `${p}?${query.toString()}`;
}

// withNamespace is the console path to with ns in its query (and none for
// the default namespace).
export function withNamespace(to: string, ns: string): string {
  const u = new URL(to, window.location.origin);
  if (ns === defaultNamespace) u.searchParams.delete("ns");
  else u.searchParams.set("ns", ns);
  return u.pathname + u.search + u.hash;
}

// keepNamespace is the console path to in the shown namespace, unless it
// names one itself; in default, to as it is.
export function keepNamespace(to: string): string {
  const ns = currentNamespace();
  if (ns === defaultNamespace) return to;
  const u = new URL(to, window.location.origin);
  if (u.searchParams.has("ns")) return to;
  return withNamespace(to, ns);
}

// objectLink is the path to an object's page in the namespace ns that
// holds it, named even when it is "default": under "All namespaces" a
// row's link opens it in its own.
export function objectLink(to: string, ns?: string): string {
  if (!ns) return to;
  const u = new URL(to, window.location.origin);
  u.searchParams.set("ns", ns);
  return u.pathname + u.search + u.hash;
}

// atNamespace is an API path in the namespace ns, when it is known (a
// listed object's own), else in the one shown.
export function atNamespace(path: string, ns?: string): string {
  if (!ns) return path;
  const [p, q = ""] = path.split("?", 2);
  const query = new URLSearchParams(q);
  query.set("namespace", ns);
  return `${p}?${query.toString()}`;
}

// NamespaceSwitcher is the header's choice of namespace: "All namespaces"
// and every namespace the server lists. Choosing one opens the section's
// first page in it.
export function NamespaceSwitcher() {
  const loc = useLocation();
  const ns = namespaceOf(loc.searchParams);
  const [names, setNames] = useState<string[]>([]);
  const [failed, setFailed] = useState(false);
  useEffect(() => {
    get<NamespaceList>("/namespaces").then(
      (l) => {
        setNames((l.items ?? []).map((n) => n.name));
        setFailed(false);
      },
      () => setFailed(true),
    );
  }, [ns]);
  const shown = names.includes(ns) || ns === allNamespaces ? names : [...names, ns].sort();
  const choose = (next: string) => {
    // A detail page names an object of the namespace left: the section's
    // list is what the new one has.
    const section = loc.pathname.split("/").filter(Boolean)[0] ?? "resources";
    navigate(withNamespace(`/${section}`, next), false, false);
  };
  return (
    <label className="ns-switch" title={failed ? "Cannot list the namespaces" : undefined}>
      Namespace{" "}
      <select value={ns} onChange={(e) => choose(e.target.value)} data-testid="namespace-switcher">
        <option value={allNamespaces}>All namespaces</option>
        {shown.map((n) => (
          <option key={n} value={n}>
            {n}
          </option>
        ))}
      </select>
    </label>
  );
}

// NamespaceHead is a list's namespace column header, shown under "All
// namespaces" only.
export function NamespaceHead() {
  return useNamespace() === allNamespaces ? <th scope="col">namespace</th> : null;
}

// NamespaceCell is a row's namespace cell, shown under "All namespaces"
// only.
export function NamespaceCell({ ns }: { ns?: string }) {
  return useNamespace() === allNamespaces ? <td data-namespace={ns}>{ns}</td> : null;
}
