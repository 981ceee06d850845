import { useCallback, useEffect, useRef, useState, useSyncExternalStore } from "react";
import { changes, type Topic } from "./api";
import { navigate } from "./router";

export interface Live<T> {
  data?: T;
  error?: unknown;
  loading: boolean;
  reload: () => void;
}

// useLive loads data with load, again whenever deps change, and again when
// the change stream names one of topics. At most one load runs at a time: a
// change during a load queues exactly one more, and loads are at least
// minGapMs apart, so a converging tree costs a bounded rate of reads and an
// idle page none.
export function useLive<T>(load: () => Promise<T>, deps: unknown[], topics: Topic[], minGapMs = 0): Live<T> {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true });
  const loadRef = useRef(load);
  loadRef.current = load;
  const gen = useRef(0);
  const running = useRef(false);
  const again = useRef(false);
  const lastStart = useRef(0);
  const timer = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);

  const run = useCallback(() => {
    if (running.current) {
      again.current = true;
      return;
    }
    const wait = lastStart.current + minGapMs - Date.now();
    if (wait > 0) {
      if (!timer.current)
        timer.current = setTimeout(() => {
          timer.current = undefined;
          run();
        }, wait);
      return;
    }
    running.current = true;
    lastStart.current = Date.now();
    const my = gen.current;
    loadRef
      .current()
      .then(
        (data) => my === gen.current && setState({ data, loading: false }),
        (error) => my === gen.current && setState((s) => ({ data: s.data, error, loading: false })),
      )
      .finally(() => {
        running.current = false;
        if (again.current) {
          again.current = false;
          run();
        }
      });
  }, [minGapMs]);

  useEffect(() => {
    gen.current++;
    running.current = false;
    again.current = false;
    lastStart.current = 0;
    setState((s) => ({ data: s.data, loading: true }));
    run();
  }, deps);

  const topicKey = topics.join(",");
  useEffect(() => {
    if (!topicKey) return;
    const want = new Set(topicKey.split(","));
    return changes.subscribe((changed) => {
      for (const t of changed) {
        if (want.has(t)) {
          run();
          return;
        }
      }
    });
  }, [topicKey, run]);

  useEffect(() => () => clearTimeout(timer.current), []);

  return { ...state, reload: run };
}

export function useStreamConnected(): boolean {
  return useSyncExternalStore(changes.onStatus, () => changes.connected);
}

// usePoll re-runs fn every ms while the tab is visible: for what no NOTIFY
// announces (a member's heartbeat age).
export function usePoll(fn: () => void, ms: number) {
  const ref = useRef(fn);
  ref.current = fn;
  useEffect(() => {
    const id = setInterval(() => {
      if (document.visibilityState === "visible") ref.current();
    }, ms);
    return () => clearInterval(id);
  }, [ms]);
}

// KeysetPages is a keyset-paged list's navigation, kept in the URL: the
// cursor of the page shown, go (a change of the URL's query, which starts
// again from the first page unless keepCursor), and next and prev (Next
// follows the server's cursor, Previous pops a stack of the cursors behind).
export interface KeysetPages {
  cursor: string;
  go: (mut: (p: URLSearchParams) => void, keepCursor?: boolean) => void;
  next: (nextCursor?: string) => void;
  prev: () => void;
  // page counts from 1: the cursors behind this page, plus one.
  page: number;
}

// useKeysetPages pages the list at path whose URL query is search.
export function useKeysetPages(path: string, search: URLSearchParams): KeysetPages {
  const cursor = search.get("cursor") ?? "";
  const [stack, setStack] = useState<string[]>([]);
  // The first page has no cursor behind it, however it was reached.
  useEffect(() => {
    if (!cursor) setStack([]);
  }, [cursor]);
  const go = (mut: (p: URLSearchParams) => void, keepCursor = false) => {
    const p = new URLSearchParams(search);
    mut(p);
    if (!keepCursor) {
      p.delete("cursor");
      setStack([]);
    }
    navigate(`${path}?${p.toString()}`);
  };
  const next = (nextCursor?: string) => {
    if (!nextCursor) return;
    setStack([...stack, cursor]);
    go((p) => p.set("cursor", nextCursor), true);
  };
  const prev = () => {
    const s = [...stack];
    const back = s.pop() ?? "";
    setStack(s);
    go((p) => (back ? p.set("cursor", back) : p.delete("cursor")), true);
  };
  return { cursor, go, next, prev, page: stack.length + 1 };
}
