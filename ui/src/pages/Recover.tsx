import { useState } from "react";
import { call } from "../api";
import { ProblemView } from "../components";
import type { RecoverResult } from "../types";

// localInput renders a time for a datetime-local field (the browser's zone).
function localInput(d: Date): string {
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

// Recover is the Failed view's action: re-drive every resource of the
// view's kind and label filters that failed since a time (POST
// /resources:reconcile). A confirm dialog shows the server's dry-run count
// first; the re-drive is one call bounded by the server's limit, and says
// when more remain.
export function Recover({ kind, labelSelector }: { kind: string; labelSelector: string }) {
  const [since, setSince] = useState(() => localInput(new Date(Date.now() - 3600_000)));
  const [preview, setPreview] = useState<RecoverResult>();
  const [done, setDone] = useState<RecoverResult>();
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);

  const send = async (dryRun: boolean) => {
    const body: Record<string, string> = { since: new Date(since).toISOString() };
    if (kind) body.kind = kind;
    if (labelSelector) body.label_selector = labelSelector;
    setBusy(true);
    setError(undefined);
    try {
      return (await call<RecoverResult>("POST", `/resources:reconcile${dryRun ? "?dry_run=true" : ""}`, body)).data;
    } catch (e) {
      setError(e);
      return undefined;
    } finally {
      setBusy(false);
    }
  };
  const ask = async () => {
    setDone(undefined);
    setPreview(await send(true));
  };
  const confirm = async () => {
    const r = await send(false);
    setPreview(undefined);
    setDone(r);
  };

  return (
    <section className="recover" aria-label="Recover">
      <label>
        failed since
        <input type="datetime-local" name="since" value={since} onChange={(e) => setSince(e.target.value)} />
      </label>{" "}
      <button type="button" onClick={() => void ask()} disabled={busy || !since}>
        Recover…
      </button>
      {done && (
        <span className="muted" role="status" data-testid="recover-result">
          {" "}
          {done.reconciled} of {done.matched} re-driven{done.more ? "; more remain: recover again" : ""}
        </span>
      )}
      <ProblemView error={error} />
      {preview && (
        <div className="dialog" role="dialog" aria-modal="true" aria-labelledby="recover-h" data-testid="recover-dialog">
          <h2 id="recover-h">Re-drive failed resources?</h2>
          <p data-testid="recover-count" data-count={preview.matched} data-more={preview.more}>
            {preview.matched} resource{preview.matched === 1 ? "" : "s"}
            {kind ? ` of kind ${kind}` : ""}
            {labelSelector ? ` matching ${labelSelector}` : ""} failed since {new Date(since).toLocaleString()}
            {preview.more ? " (and more beyond this call's limit)" : ""}.
          </p>
          <p className="muted">Each is reconciled anew on its current spec, as Reconcile now does one resource.</p>
          <button type="button" onClick={() => void confirm()} disabled={busy || preview.matched === 0}>
            Re-drive {preview.matched}
          </button>{" "}
          <button type="button" onClick={() => setPreview(undefined)}>
            Cancel
          </button>
        </div>
      )}
    </section>
  );
}
