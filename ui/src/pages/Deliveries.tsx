import { useState, type FormEvent } from "react";
import { call, enc, get } from "../api";
import { Fields, Json, Loading, PageSummary, Pager, ProblemView, Section, When } from "../components";
import { useKeysetPages, useLive } from "../hooks";
import { NamespaceCell, NamespaceHead, objectLink } from "../namespace";
import { Link } from "../router";
import type { Delivery, DeliveryList, EndpointList, KindList, ReplayAccepted } from "../types";

// The filters the page keeps in its URL, so that a filtered view is a link;
// each is a query parameter of GET /deliveries.
const filterKeys = ["endpoint", "kind", "name", "outcome", "since", "until"] as const;
type FilterKey = (typeof filterKeys)[number];

// The outcome classes of GET /deliveries' classification filter (its
// doc), and "failed", every class but ok, accepted and callback_ok.
const outcomes = [
  "ok", "task_error", "accepted", "callback_ok", "callback_error", "rate_limited", "gone", "redirect", "client_error",
  "server_error", "retryable", "unexpected", "malformed", "too_large", "timeout", "deadline", "network", "blocked",
  "cancelled", "async_timeout",
];

// A datetime-local input shows local time; the URL and the API hold RFC 3339.
// WindowInputs are a filter form's since and until fields: datetime-local
// inputs over ISO values.
export function WindowInputs({ since, until, set }: { since: string; until: string; set: (k: "since" | "until", v: string) => void }) {
  return (
    <>
      <label>
        since
        <input type="datetime-local" value={toInput(since)} onChange={(e) => set("since", fromInput(e.target.value))} name="since" />
      </label>
      <label>
        until
        <input type="datetime-local" value={toInput(until)} onChange={(e) => set("until", fromInput(e.target.value))} name="until" />
      </label>
    </>
  );
}

const toInput = (iso: string) => {
  if (!iso) return "";
  const d = new Date(iso);
  if (isNaN(d.getTime())) return "";
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
};
const fromInput = (local: string) => (local ? new Date(local).toISOString() : "");

// Deliveries is the delivery log, keyset-paged newest first as the
// Resources list is: Next follows the server's cursor, Previous pops a
// cursor stack.
export function Deliveries({ search }: { search: URLSearchParams }) {
  const { cursor, go, next, prev, page } = useKeysetPages("/deliveries", search);

  const query = new URLSearchParams();
  for (const k of ["endpoint", "kind", "name", "since", "until"] as const) {
    const v = search.get(k);
    if (v) query.set(k, v);
  }
  const outcome = search.get("outcome") ?? "";
  if (outcome === "failed") query.set("failed", "true");
  else if (outcome) query.set("classification", outcome);
  query.set("limit", search.get("limit") ?? "50");
  if (cursor) query.set("cursor", cursor);
  const q = query.toString();
  const list = useLive(() => get<DeliveryList>(`/deliveries?${q}`), [q], ["resources"], 2000);


  const items = list.data?.items ?? [];
  return (
    <>
      <h1>Deliveries</h1>
      <p className="muted">Every attempt to deliver a task to an endpoint, newest first: successes, failures, 202s and their callbacks.</p>
      <Filters
        key={filterKeys.map((k) => search.get(k) ?? "").join("\u0000")}
        search={search}
        onApply={(vals) => go((p) => filterKeys.forEach((k) => (vals[k] ? p.set(k, vals[k]) : p.delete(k))))}
      />
      <ProblemView error={list.error} />
      {list.loading && !list.data && <Loading what="deliveries" />}
      {list.data && (
        <>
          <PageSummary count={items.length} noun="attempt" page={page} last={!list.data.next_cursor} />
          <DeliveryTable items={items} label="Deliveries" />
          {items.length === 0 && <p>No attempt matches.</p>}
          <Pager onPrev={prev} canPrev={!!cursor} onNext={next} nextCursor={list.data.next_cursor ?? undefined} />
        </>
      )}
    </>
  );
}

// DeliveryTable lists attempts, each linking to its detail.
export function DeliveryTable({ items, label }: { items: Delivery[]; label: string }) {
  return (
    <div className="scroll">
      <table aria-label={label} className="deliveries">
        <thead>
          <tr>
            <NamespaceHead />
            <th scope="col">attempt</th>
            <th scope="col">at</th>
            <th scope="col">endpoint</th>
            <th scope="col">resource</th>
            <th scope="col">task</th>
            <th scope="col">epoch / attempt</th>
            <th scope="col">HTTP status</th>
            <th scope="col">latency</th>
            <th scope="col">classification</th>
            <th scope="col">excerpt</th>
          </tr>
        </thead>
        <tbody>
          {items.map((d) => (
            <tr key={d.id} data-delivery={d.id} data-classification={d.classification} data-resource={`${d.resource.kind}/${d.resource.name}`} data-endpoint={d.endpoint}>
              <NamespaceCell ns={d.resource.namespace} />
              <td>
                <Link to={objectLink(`/deliveries/${d.id}`, d.resource.namespace)}>#{d.id}</Link>
              </td>
              <td>
                <When at={d.at} />
              </td>
              <td>{d.endpoint}</td>
              <td>{d.resource.kind ? `${d.resource.kind}/${d.resource.name}` : ""}</td>
              <td>
                {d.task_type}
                {d.action ? ` ${d.action}` : ""}
              </td>
              <td>
                {d.claim_epoch} / {d.attempt}
              </td>
              <td>{d.http_status || ""}</td>
              <td>{d.latency_ms} ms</td>
              <td className={d.failed ? "bad" : "ok"}>{d.classification}</td>
              <td className="excerpt">{d.excerpt}</td>
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
  const kinds = useLive(() => get<KindList>("/kinds"), [], ["kinds"]);
  const endpoints = useLive(() => get<EndpointList>("/endpoints"), [], ["endpoints"]);
  const set = (k: FilterKey, v: string) => setVals({ ...vals, [k]: v });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    onApply(vals);
  };
  return (
    <form className="filters" onSubmit={submit} aria-label="Filters">
      <label>
        endpoint
        <select value={vals.endpoint} onChange={(e) => set("endpoint", e.target.value)} name="endpoint">
          <option value="">any</option>
          {(endpoints.data?.items ?? []).map((ep) => (
            <option key={ep.name}>{ep.name}</option>
          ))}
        </select>
      </label>
      <label>
        kind
        <select value={vals.kind} onChange={(e) => set("kind", e.target.value)} name="kind">
          <option value="">any</option>
          {(kinds.data?.items ?? []).map((k) => (
            <option key={k.kind}>{k.kind}</option>
          ))}
        </select>
      </label>
      <label>
        resource name
        <input value={vals.name} onChange={(e) => set("name", e.target.value)} name="name" placeholder="with a kind" />
      </label>
      <label>
        outcome
        <select value={vals.outcome} onChange={(e) => set("outcome", e.target.value)} name="outcome">
          <option value="">any</option>
          <option value="failed">failed (any failure)</option>
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

// envelope is the request's envelope as far as the log keeps it: the
// fields that identify the task and its claim. The documents it carried
// (spec, status, config) are not kept: they may hold secrets, and a new
// claim sends the state of its own day.
function envelope(d: Delivery) {
  return {
    type: "task",
    task_id: d.task_id,
    claim_epoch: d.claim_epoch,
    attempt: d.attempt,
    task_type: d.task_type,
    operation: d.action ? { verb: d.action } : undefined,
    kind: d.resource.kind,
    resource: { id: d.resource.id, kind: d.resource.kind, name: d.resource.name },
  };
}

export function DeliveryDetail({ id }: { id: string }) {
  const path = `/deliveries/${enc(id)}`;
  const d = useLive(() => get<Delivery>(path), [path], []);
  const [replay, setReplay] = useState<ReplayAccepted | null>(null);
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const doReplay = async () => {
    if (!window.confirm(`Replay attempt #${id}? Its resource is reconciled again under a new claim, on today's desired state.`)) return;
    setError(undefined);
    setBusy(true);
    try {
      setReplay((await call<ReplayAccepted>("POST", `${path}/replay`)).data);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  const v = d.data;
  const res = v?.resource;
  return (
    <>
      <p className="crumbs">
        <Link to="/deliveries">Deliveries</Link> / #{id}
      </p>
      <h1>Attempt #{id}</h1>
      <ProblemView error={d.error ?? error} />
      {d.loading && !v && <Loading what="the attempt" />}
      {v && res && (
        <>
          <div className="actions">
            <button type="button" onClick={() => void doReplay()} disabled={busy || v.task_type === "react" || !res.id}>
              Replay
            </button>{" "}
            <span className="muted" data-testid="replay-semantics">
              A replay never resends this request nor applies its stored outcome: it asks the engine to run the task again under a new
              claim (a new claim epoch, so this attempt's answer, if it ever came, is fenced out), on the resource's desired state as it
              is now; an operation's attempt is replayed as a new operation of the same verb and input. It is logged in the resource's
              events.
            </span>
          </div>
          {replay && (
            <p className="card" role="status" data-testid="replay-result">
              {replay.message}
              {replay.operation ? ` (operation ${replay.operation.id})` : ""}.{" "}
              <Link to={`/resources/${enc(res.kind ?? "")}/${enc(res.name ?? "")}`}>Follow it on the resource</Link>
            </p>
          )}
          <div className="grid">
            <Section title="Attempt">
              <Fields
                rows={[
                  ["endpoint", <Link to={`/endpoints/${enc(v.endpoint)}`}>{v.endpoint}</Link>],
                  [
                    "resource",
                    res.kind && res.name ? (
                      <Link to={`/resources/${enc(res.kind)}/${enc(res.name)}`} data-testid="resource-link">
                        {res.kind}/{res.name}
                      </Link>
                    ) : undefined,
                  ],
                  ["task", <code>{v.task_id}</code>],
                  ["task type", `${v.task_type ?? ""}${v.action ? ` (${v.action})` : ""}`],
                  ["claim epoch", <span data-testid="claim-epoch">{v.claim_epoch}</span>],
                  ["delivery attempt of the task", v.attempt],
                  ["at", <When at={v.at} />],
                ]}
              />
            </Section>
            <Section title="Answer">
              <Fields
                rows={[
                  ["classification", <span data-testid="classification" className={v.failed ? "bad" : "ok"}>{v.classification}</span>],
                  ["failed", v.failed ? "yes" : "no"],
                  ["HTTP status", v.http_status || "no answer"],
                  ["latency", `${v.latency_ms} ms`],
                  ["excerpt", v.excerpt ? <pre className="excerpt" data-testid="excerpt">{v.excerpt}</pre> : undefined],
                ]}
              />
            </Section>
          </div>
          <Section title="Request envelope">
            <p className="muted">
              The fields that identify the task and its claim. The log does not keep the documents the request carried (spec, status,
              config): they may hold secrets, and each claim sends the state of its own day.
            </p>
            <Json value={envelope(v)} label="Request envelope" />
          </Section>
        </>
      )}
    </>
  );
}
