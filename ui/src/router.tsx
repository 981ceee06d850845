import { useSyncExternalStore, type AnchorHTMLAttributes, type MouseEvent } from "react";
import { keepNamespace } from "./namespace";

// A small History API router: the server answers index.html for every
// console route (control/api/console.go), and the app picks the page.

const listeners = new Set<() => void>();
window.addEventListener("popstate", () => listeners.forEach((fn) => fn()));

function subscribe(fn: () => void) {
  listeners.add(fn);
  return () => {
    listeners.delete(fn);
  };
}

const snapshot = () => window.location.pathname + window.location.search;

export function useLocation(): URL {
  const href = useSyncExternalStore(subscribe, snapshot);
  return new URL(href, window.location.origin);
}

// navigate opens the console path to, in the namespace shown unless to
// names one (or keep is false: the namespace switcher's own move).
export function navigate(to: string, replace = false, keep = true) {
  if (keep) to = keepNamespace(to);
  if (to === snapshot()) return;
  if (replace) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  listeners.forEach((fn) => fn());
}

export function Link({ to: path, ...rest }: { to: string } & AnchorHTMLAttributes<HTMLAnchorElement>) {
  const to = keepNamespace(path);
  const onClick = (e: MouseEvent<HTMLAnchorElement>) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(to);
    window.scrollTo(0, 0);
  };
  return <a href={to} onClick={onClick} {...rest} />;
}
