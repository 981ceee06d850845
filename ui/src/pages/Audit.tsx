import { useState, type FormEvent } from "react";
import { enc, get } from "../api";
import { Loading, PageSummary, Pager, ProblemView, When } from "../components";
import { useKeysetPages, useLive } from "../hooks";
import { Link } from "../router";
import type { AuditEntry, AuditList } from "../types";
import { WindowInputs } from "./Deliveries";

// The filters the page keeps in its URL, so that a filtered view is a link;
// each is a query parameter of GET /audit.
const filterKeys = ["namespace", "kind", "name", "subject", "outcome", "since", "until"] as const;
type FilterKey = (typeof filterKeys)[number];

// The outcomes GET /audit filters on (AuditEntry.outcome).
const outcomes = ["ok", "refused", "error"];

// Audit is the audit trail, keyset-paged newest first as the Deliveries
// page is. It lists every namespace unless the namespace filter names one.
export function Audit({ search }: { search: URLSearchParams }) {
  const { cursor, go, next, prev, page } = useKeysetPages("/audit", search);

  const query = new URLSearchParams();
  query.set("namespace", search.get("namespace") || "*");
  for (const k of ["kind", "name", "subject", "outcome", "since", "until"] as const) {
    const v = search.get(k);
    if (v) query.set(k, v);
  }
  query.set("limit", search.get("limit") ?? "50");
  if (cursor) query.set("cursor", cursor);
  const q = query.toString();
  // The trail has no change topic of its own: a write of any object wakes it.
  const list = useLive(() => get<AuditList>(`/audit?${q}`), [q], ["resources", "kinds", "providerconfigs", "bindings", "endpoints"], 2000);

  const items = list.data?.items ?? [];
  return (
    <>
      <h1>Audit</h1>
      <p className="muted">
        Every request that changed or tried to change something, newest first: who, what, when, from where, and how it ended (refusals
        included).
      </p>
      <Filters
        key={filterKeys.map((k) => search.get(k) ?? "").join("\u0000")}
        search={search}
        onApply={(vals) => go((p) => filterKeys.forEach((k) => (vals[k] ? p.set(k, vals[k]) : p.delete(k))))}
      />
      <ProblemView error={list.error} />
      {list.loading && !list.data && <Loading what="the audit trail" />}
      {list.data && (
        <>
          <PageSummary count={items.length} noun="request" page={page} last={!list.data.next_cursor} />
          <AuditTable items={items} />
          {items.length === 0 && <p>No request matches.</p>}
          <Pager onPrev={prev} canPrev={!!cursor} onNext={next} nextCursor={list.data.next_cursor ?? undefined} />
        </>
      )}
    </>
  );
}

// object is what an entry addressed, as a link when it is a resource that
// may still exist.
function object(e: AuditEntry) {
  if (!e.object_kind) return "";
  const text = e.object_name ? `${e.object_kind}/${e.object_name}` : e.object_kind;
  if (e.object_name && e.path.startsWith(`/api/v1/resources/`)) {
    return <Link to={`/resources/${enc(e.object_kind)}/${enc(e.object_name)}`}>{text}</Link>;
  }
  return text;
}

function AuditTable({ items }: { items: AuditEntry[] }) {
  return (
    <div className="scroll">
      <table aria-label="Audit">
        <thead>
          <tr>
            <th scope="col">at</th>
            <th scope="col">subject</th>
            <th scope="col">request</th>
            <th scope="col">namespace</th>
            <th scope="col">object</th>
            <th scope="col">version</th>
            <th scope="col">status</th>
            <th scope="col">outcome</th>
            <th scope="col">request id · from</th>
          </tr>
        </thead>
        <tbody>
          {items.map((e) => (
            <tr key={e.id} data-audit={e.id} data-outcome={e.outcome} data-subject={e.subject} data-object={`${e.object_kind ?? ""}/${e.object_name ?? ""}`}>
              <td>
                <When at={e.at} />
              </td>
              <td title={e.groups?.length ? `groups: ${e.groups.join(", ")}` : undefined}>{e.subject}</td>
              <td>
                <code>
                  {e.method} {e.path}
                </code>
                {e.dry_run ? " (dry run)" : ""}
              </td>
              <td>{e.namespace}</td>
              <td>{object(e)}</td>
              <td>
                {e.version_before ?? "–"} → {e.version_after ?? "–"}
              </td>
              <td>{e.status}</td>
              <td className={e.outcome === "ok" ? "ok" : "bad"}>{e.outcome}</td>
              <td className="excerpt">
                <code>{e.request_id}</code> · {e.remote_addr}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function Filters({ search, onApply }: { search: URLSearchParams; onApply: (v: Record<FilterKey, string>) => void }) {
  const [vals, setVals] = useState<Record<FilterKey, string>>(
    () => Object.fromEntries(filterKeys.map((k) => [k, search.get(k) ?? ""])) as Record<FilterKey, string>,
  );
  const set = (k: FilterKey, v: string) => setVals({ ...vals, [k]: v });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    onApply(vals);
  };
  return (
    <form className="filters" onSubmit={submit} aria-label="Filters">
      <label>
        namespace
        <input value={vals.namespace} onChange={(e) => set("namespace", e.target.value)} name="namespace" placeholder="all" />
      </label>
      <label>
        object kind
        <input value={vals.kind} onChange={(e) => set("kind", e.target.value)} name="kind" placeholder="a kind, or endpoints, …" />
      </label>
      <label>
        object name
        <input value={vals.name} onChange={(e) => set("name", e.target.value)} name="name" />
      </label>
      <label>
        subject
        <input value={vals.subject} onChange={(e) => set("subject", e.target.value)} name="subject" placeholder="token:admin-0" />
      </label>
      <label>
        outcome
        <select value={vals.outcome} onChange={(e) => set("outcome", e.target.value)} name="outcome">
          <option value="">any</option>
          {outcomes.map((o) => (
            <option key={o}>{o}</option>
          ))}
        </select>
      </label>
      <WindowInputs since={vals.since} until={vals.until} set={set} />
      <button type="submit">Filter</button>
    </form>
  );
}
