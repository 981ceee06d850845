import { useEffect, useState } from "react";
import { call, enc, get } from "../api";
import { Json, Loading, ProblemView, SchemaView, Section } from "../components";
import { useLive } from "../hooks";
import { Link } from "../router";
import type { KindConfig, KindList, Manifest } from "../types";

export function Kinds() {
  const kinds = useLive(() => get<KindList>("/kinds"), [], ["kinds"]);
  const items = kinds.data?.items ?? [];
  return (
    <>
      <h1>Kinds</h1>
      <ProblemView error={kinds.error} />
      {kinds.loading && !kinds.data && <Loading what="kinds" />}
      <div className="scroll">
        <table aria-label="Kinds">
          <thead>
            <tr>
              <th scope="col">kind</th>
              <th scope="col">versions</th>
              <th scope="col">reactor</th>
            </tr>
          </thead>
          <tbody>
            {items.map((k) => (
              <tr key={k.kind} data-kind={k.kind}>
                <td>{k.kind}</td>
                <td>
                  {(k.versions ?? []).map((v) => (
                    <Link key={v} to={`/kinds/${enc(k.kind)}/${v}`} className="chip-link">
                      v{v}
                    </Link>
                  ))}
                </td>
                <td>{k.reactor ? "yes" : ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {kinds.data && items.length === 0 && <p>No kind is published yet. Apply a manifest below.</p>}
      <ApplyManifest />
    </>
  );
}

// ApplyManifest publishes a manifest (PUT /kinds/{kind}/manifest). A refusal
// is shown as the API words it: for a breaking republish, the stability
// gate's 409 lists each change at its schema location.
export function ApplyManifest({ initial, onApplied }: { initial?: Manifest; onApplied?: () => void }) {
  const [text, setText] = useState(initial ? JSON.stringify(initial, null, 2) : "");
  // edited: the text holds the user's changes. A live reload of the
  // manifest (any kinds event, repeated a second after a burst) must not
  // overwrite them; it refreshes the text only while it is unedited.
  const [edited, setEdited] = useState(false);
  const [error, setError] = useState<unknown>();
  const [result, setResult] = useState("");
  useEffect(() => {
    if (initial && !edited) setText(JSON.stringify(initial, null, 2));
  }, [initial, edited]);
  const apply = async () => {
    setError(undefined);
    setResult("");
    let kind: string | undefined;
    try {
      kind = (JSON.parse(text) as { kind?: string }).kind;
    } catch (e) {
      setError(`the manifest is not JSON: ${String(e)}`);
      return;
    }
    if (!kind) {
      setError("the manifest needs a kind");
      return;
    }
    try {
      const a = await call<Manifest>("PUT", `/kinds/${enc(kind)}/manifest`, text);
      setResult(`${kind}/${a.data.kind_version}: ${a.headers.get("X-Apply-Result") ?? "applied"}`);
      setEdited(false);
      onApplied?.();
    } catch (e) {
      setError(e);
    }
  };
  return (
    <Section title={initial ? "Republish this manifest" : "Apply a manifest"} id="apply-manifest">
      <label className="block">
        Manifest (JSON)
        <textarea rows={14} value={text} onChange={(e) => { setText(e.target.value); setEdited(true); }} spellCheck={false} data-testid="manifest-text" />
      </label>
      <button type="button" onClick={() => void apply()}>
        Apply manifest
      </button>
      <p aria-live="polite" data-testid="apply-result">
        {result}
      </p>
      <ProblemView error={error} />
    </Section>
  );
}

export function KindDetail({ kind, version }: { kind: string; version: number }) {
  const base = `/kinds/${enc(kind)}/versions/${version}`;
  const manifest = useLive(() => get<Manifest>(`${base}/manifest`), [base], ["kinds"]);
  const m = manifest.data;
  return (
    <>
      <p className="crumbs">
        <Link to="/kinds">Kinds</Link> / {kind}
      </p>
      <h1>
        {kind} v{version}
      </h1>
      <ProblemView error={manifest.error} />
      {manifest.loading && !m && <Loading what="the manifest" />}
      {m && (
        <>
          {m.description && <p>{m.description}</p>}
          <p>
            <Link to={`/resources?kind=${enc(kind)}&kind_version=${version}`}>Its resources</Link> ·{" "}
            <Link to={`/providerconfigs?kind=${enc(kind)}`}>Its provider configs</Link>
          </p>
          <Section title="Reactions">
            <div className="scroll">
              <table aria-label="Reactions">
                <thead>
                  <tr>
                    <th scope="col">name</th>
                    <th scope="col">trigger</th>
                    <th scope="col">emits</th>
                    <th scope="col">verb</th>
                  </tr>
                </thead>
                <tbody>
                  {(m.reactions ?? []).map((r) => (
                    <tr key={r.name}>
                      <td>{r.name}</td>
                      <td>{r.trigger}</td>
                      <td>{(r.emits ?? []).join(", ")}</td>
                      <td>{r.verb ?? ""}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
            {m.finalizer_name && <p>Finalizer: {m.finalizer_name}</p>}
          </Section>
          <Section title="Spec schema">
            <SchemaView schema={m.spec_schema} label="spec schema" />
          </Section>
          <Section title="Status schema">
            <SchemaView schema={m.status_schema} label="status schema" />
          </Section>
          <Section title="Config schema">
            <SchemaView schema={m.config_schema} label="config schema" />
          </Section>
          <LiveConfig base={base} />
          <Section title="Manifest">
            <Json value={m} label="manifest" />
          </Section>
          <ApplyManifest initial={m} onApplied={manifest.reload} />
        </>
      )}
    </>
  );
}

const configFields: (keyof KindConfig)[] = [
  "max_inflight",
  "task_deadline_secs",
  "resync_interval_secs",
  "orphan_grace_secs",
  "max_transient_attempts",
];

function LiveConfig({ base }: { base: string }) {
  const cfg = useLive(() => get<KindConfig>(`${base}/config`), [base], ["kinds"]);
  const [edit, setEdit] = useState<KindConfig | null>(null);
  const [error, setError] = useState<unknown>();
  const [result, setResult] = useState("");
  const c = edit ?? cfg.data;
  const save = async () => {
    setError(undefined);
    try {
      const a = await call<KindConfig>("PUT", `${base}/config`, edit);
      setResult(a.headers.get("X-Apply-Result") ?? "saved");
      setEdit(null);
      cfg.reload();
    } catch (e) {
      setError(e);
    }
  };
  return (
    <Section title="Live config">
      <ProblemView error={cfg.error} />
      {c && (
        <form
          className="filters"
          onSubmit={(e) => {
            e.preventDefault();
            void save();
          }}
        >
          {configFields.map((f) => (
            <label key={f}>
              {f.replaceAll("_", " ")}
              <input type="number" min={0} value={String(c[f])} onChange={(e) => setEdit({ ...c, [f]: Number(e.target.value) })} />
            </label>
          ))}
          <label>
            <input type="checkbox" checked={c.resync_recomposes} onChange={(e) => setEdit({ ...c, resync_recomposes: e.target.checked })} /> resync recomposes
          </label>
          <button type="submit" disabled={!edit}>
            Save config
          </button>
        </form>
      )}
      <p aria-live="polite">{result}</p>
      <ProblemView error={error} />
      {!c && cfg.loading && <Loading what="the config" />}
    </Section>
  );
}
