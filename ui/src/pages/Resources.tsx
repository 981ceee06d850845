import { useState, type FormEvent } from "react";
import { enc, get } from "../api";
import { Loading, PageSummary, Pager, PhaseBadge, ProblemView, When } from "../components";
import { useKeysetPages, useLive } from "../hooks";
import { NamespaceCell, NamespaceHead, objectLink } from "../namespace";
import { Link } from "../router";
import { phases, type KindList, type ResourceList } from "../types";
import { Recover } from "./Recover";

// The filters the list keeps in its URL, so that a filtered view is a link.
const filterKeys = ["kind", "kind_version", "label_selector", "owner", "name_prefix"] as const;

// Resources is the keyset-paged list: one page at a time, Next follows the
// server's cursor, Previous pops a cursor stack kept in the URL's state.
// No total is asked for; the phase chips are a server-side union.
export function Resources({ search }: { search: URLSearchParams }) {
  const selected = search.getAll("phase");
  const { cursor, go, next, prev, page } = useKeysetPages("/resources", search);
  const limit = search.get("limit") ?? "50";

  const query = new URLSearchParams();
  for (const k of filterKeys) {
    const v = search.get(k);
    if (v) query.set(k, v);
  }
  for (const p of selected) query.append("phase", p);
  query.set("limit", limit);
  // The table shows neither: leaving them out keeps a page to its limit.
  query.set("fields", "-spec,-status");
  if (cursor) query.set("cursor", cursor);
  const q = query.toString();

  const list = useLive(() => get<ResourceList>(`/resources?${q}`), [q], ["resources"]);


  const toggle = (phase: string) =>
    go((p) => {
      const now = p.getAll("phase");
      p.delete("phase");
      for (const x of now.includes(phase) ? now.filter((x) => x !== phase) : [...now, phase]) p.append("phase", x);
    });


  const items = list.data?.items ?? [];
  return (
    <>
      <h1>Resources</h1>
      <Filters key={filterKeys.map((k) => search.get(k) ?? "").join("\u0000")} search={search} onApply={(vals) => go((p) => filterKeys.forEach((k) => (vals[k] ? p.set(k, vals[k]) : p.delete(k))))} />
      <div className="chips" role="group" aria-label="Phases (any of)">
        {phases.map((ph) => (
          <button
            key={ph}
            type="button"
            className={`chip phase-${ph.toLowerCase()}`}
            aria-pressed={selected.includes(ph)}
            onClick={() => toggle(ph)}
            data-chip={ph}
          >
            {ph}
          </button>
        ))}
        {selected.length > 0 && (
          <button type="button" className="link" onClick={() => go((p) => p.delete("phase"))}>
            Clear phases
          </button>
        )}
      </div>
      {selected.length === 1 && selected[0] === "Failed" && <Recover kind={search.get("kind") ?? ""} labelSelector={search.get("label_selector") ?? ""} />}
      <ProblemView error={list.error} />
      {list.loading && !list.data && <Loading what="resources" />}
      {list.data && (
        <>
          <PageSummary count={items.length} noun="resource" page={page} last={!list.data.next_cursor} />
          <div className="scroll">
            <table className="resources" aria-label="Resources">
              <thead>
                <tr>
                  <NamespaceHead />
                  <th scope="col">name</th>
                  <th scope="col">kind</th>
                  <th scope="col">phase</th>
                  <th scope="col">generation / synced</th>
                  <th scope="col">labels</th>
                  <th scope="col">updated</th>
                </tr>
              </thead>
              <tbody>
                {items.map((r) => (
                  <tr key={r.id} data-resource={`${r.kind}/${r.name}`}>
                    <NamespaceCell ns={r.namespace} />
                    <td>
                      <Link to={objectLink(`/resources/${enc(r.kind)}/${enc(r.name)}`, r.namespace)}>{r.name}</Link>
                    </td>
                    <td>
                      {r.kind}/{r.kind_version}
                    </td>
                    <td>
                      <PhaseBadge phase={r.phase} />
                    </td>
                    <td>
                      {r.generation} / {r.synced_gen}
                    </td>
                    <td className="labels">
                      {Object.entries(r.labels ?? {})
                        .map(([k, v]) => `${k}=${v}`)
                        .join(", ")}
                    </td>
                    <td>
                      <When at={r.updated_at} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          {items.length === 0 && <p>No resource matches.</p>}
          <Pager onPrev={prev} canPrev={!!cursor} onNext={next} nextCursor={list.data.next_cursor ?? undefined} />
        </>
      )}
    </>
  );
}

function Filters({ search, onApply }: { search: URLSearchParams; onApply: (v: Record<string, string>) => void }) {
  const [vals, setVals] = useState<Record<string, string>>(() => Object.fromEntries(filterKeys.map((k) => [k, search.get(k) ?? ""])));
  const kinds = useLive(() => get<KindList>("/kinds"), [], ["kinds"]);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    onApply(vals);
  };
  const field = (k: (typeof filterKeys)[number], label: string, placeholder: string) => (
    <label>
      {label}
      <input value={vals[k]} placeholder={placeholder} onChange={(e) => setVals({ ...vals, [k]: e.target.value })} name={k} />
    </label>
  );
  return (
    <form className="filters" onSubmit={submit} aria-label="Filters">
      <label>
        kind
        <select value={vals.kind} onChange={(e) => setVals({ ...vals, kind: e.target.value })} name="kind">
          <option value="">any</option>
          {(kinds.data?.items ?? []).map((k) => (
            <option key={k.kind}>{k.kind}</option>
          ))}
        </select>
      </label>
      {field("kind_version", "version", "any")}
      {field("label_selector", "labels", "team=a,env=prod")}
      {field("owner", "owner id", "uuid")}
      {field("name_prefix", "name starts with", "shop-")}
      <button type="submit">Filter</button>
    </form>
  );
}
