import { useCallback, useEffect, useRef, useState, useSyncExternalStore } from "react";
import { changes, type Topic } from "./api";

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
