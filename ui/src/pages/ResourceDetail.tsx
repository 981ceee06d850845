import { useState } from "react";
import { call, enc, get, ifMatch } from "../api";
import { Fields, Json, Loading, PhaseBadge, ProblemView, Section, When } from "../components";
import { useLive } from "../hooks";
import { Link, navigate } from "../router";
import type { ChildList, DepEdge, Dependencies, EventList, Manifest, OperationList, ProviderConfig, ProviderConfigList, ResourceView } from "../types";

// effectiveConfig is the provider config a task of r carries: its own
// provider_config_ref, else its kind version's default.
async function effectiveConfig(r: ResourceView): Promise<ProviderConfig | null> {
  if (r.provider_config_ref) return get<ProviderConfig>(`/providerconfigs/${enc(r.provider_config_ref)}`);
  const l = await get<ProviderConfigList>(`/providerconfigs?kind=${enc(r.kind)}&kind_version=${r.kind_version}&default=true&limit=1`);
  return l.items?.[0] ?? null;
}

export function ResourceDetail({ kind, name }: { kind: string; name: string }) {
  const path = `/resources/${enc(kind)}/${enc(name)}`;
  const detail = useLive(() => get<ResourceView>(path), [path], ["resources"]);
  const r = detail.data;
  const [busy, setBusy] = useState(false);
  const [actionError, setActionError] = useState<unknown>();
  const [message, setMessage] = useState("");

  const act = async (label: string, method: string, suffix: string, body?: unknown, headers?: Record<string, string>) => {
    setBusy(true);
    setActionError(undefined);
    try {
      await call(method, path + suffix, body, headers);
      setMessage(`${label}: done.`);
      detail.reload();
    } catch (e) {
      setActionError(e);
    } finally {
      setBusy(false);
    }
  };

  if (!r) {
    return (
      <>
        <h1>
          {kind}/{name}
        </h1>
        <ProblemView error={detail.error} />
        {detail.loading && <Loading what="the resource" />}
      </>
    );
  }
  const quarantined = r.phase === "Quarantined";
  const conditions = r.conditions ?? [];
  return (
    <>
      <p className="crumbs">
        <Link to="/resources">Resources</Link> / {r.kind}
      </p>
      <h1>
        {r.kind}/{r.name} <PhaseBadge phase={r.phase} />
      </h1>
      <div className="actions" role="group" aria-label="Actions">
        <button type="button" disabled={busy} onClick={() => act("Reconcile", "POST", "/reconcile")}>
          Reconcile now
        </button>
        <button type="button" disabled={busy} onClick={() => act(quarantined ? "Unquarantine" : "Quarantine", "POST", quarantined ? "/unquarantine" : "/quarantine")}>
          {quarantined ? "Unquarantine" : "Quarantine"}
        </button>
        <button
          type="button"
          className="danger"
          disabled={busy || r.phase === "Deleting"}
          onClick={() => {
            if (window.confirm(`Delete ${r.kind}/${r.name}, everything it owns and everything that depends on it?`)) void act("Delete", "DELETE", "", undefined, ifMatch(r.resource_version));
          }}
        >
          Delete…
        </button>
        <Link to={`/graph/${enc(r.kind)}/${enc(r.name)}`} className="button">
          Graph
        </Link>
      </div>
      <p aria-live="polite" className="muted">
        {message}
      </p>
      <ProblemView error={actionError} />
      <ProblemView error={detail.error} />
      <div className="grid">
        <Section title="Summary">
          <Fields
            rows={[
              ["id", <code>{r.id}</code>],
              ["namespace", <span data-testid="namespace">{r.namespace}</span>],
              ["kind version", r.kind_version],
              ["generation / synced", <span data-testid="generation">{`${r.generation} / ${r.synced_gen}${r.generation === r.synced_gen ? " (synced)" : " (not synced yet)"}`}</span>],
              ["health", r.health_ok ? "ok" : "reported not ready"],
              ["failure generation", r.failure_gen || undefined],
              ["last error", r.last_error],
              ["owner", r.owner_id ? <Link to={`/resources?owner=${r.owner_id}`}>{`${r.owner_id} (its children)`}</Link> : undefined],
              ["provider config", r.provider_config_ref ?? "the default"],
              ["labels", Object.entries(r.labels ?? {}).map(([k, v]) => `${k}=${v}`).join(", ")],
              ["created", <When at={r.created_at} />],
              ["updated", <When at={r.updated_at} />],
            ]}
          />
        </Section>
        <Section title="Current task">
          {r.task ? (
            <Fields
              rows={[
                ["type", r.task.task_type],
                ["state", <span data-testid="task-state">{r.task.state}</span>],
                ["trigger", r.task.trigger],
                ["reaction", r.task.reaction],
                ["generation", r.task.generation],
                ["attempt", r.task.attempts],
                ["claim epoch", r.task.claim_epoch],
                ["claimed by", r.task.claimed_by],
                ["lease until", <When at={r.task.lease_until} />],
                ["next try", <When at={r.task.not_before} />],
                ["last error", r.task.last_error],
                ["parked", r.parked],
              ]}
            />
          ) : (
            <p className="muted">No live task.</p>
          )}
          {r.last_task && (
            <p className="muted">
              Last applied task <code>{r.last_task.task_id}</code> (epoch {r.last_task.claim_epoch}), claimed <When at={r.last_task.claimed_at} />.
            </p>
          )}
          {r.teardown && (
            <>
              <h3>Teardown</h3>
              <p>{r.teardown.reason}</p>
              <Fields rows={[["remaining beneath", r.teardown.remaining], ["finalizers", (r.teardown.finalizers ?? []).join(", ")]]} />
            </>
          )}
        </Section>
      </div>
      <Section title="Conditions">
        {conditions.length === 0 ? (
          <p className="muted">None.</p>
        ) : (
          <div className="scroll">
            <table aria-label="Conditions">
              <thead>
                <tr>
                  <th scope="col">type</th>
                  <th scope="col">status</th>
                  <th scope="col">reason</th>
                  <th scope="col">message</th>
                  <th scope="col">since</th>
                </tr>
              </thead>
              <tbody>
                {conditions.map((c) => (
                  <tr key={c.type}>
                    <td>{c.type}</td>
                    <td>{c.status}</td>
                    <td>{c.reason}</td>
                    <td>{c.message}</td>
                    <td>
                      <When at={c.last_transition_time} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </Section>
      <div className="grid">
        <Section title="Spec">
          <Json value={r.spec} label="spec" />
        </Section>
        <Section title="Status">
          <Json value={r.status} label="status" />
        </Section>
      </div>
      <EffectiveConfig r={r} />
      <Children path={path} ownerId={r.id} />
      <Dependencies path={path} />
      <Operations path={path} r={r} onDone={detail.reload} />
      {r.pending_reactions && r.pending_reactions.length > 0 && (
        <Section title="Pending reactor deliveries">
          <Json value={r.pending_reactions} label="pending reactions" />
        </Section>
      )}
      {r.recent_failed_deliveries && r.recent_failed_deliveries.length > 0 && (
        <Section title="Recent failed deliveries">
          <div className="scroll">
            <table aria-label="Recent failed deliveries">
              <thead>
                <tr>
                  <th scope="col">at</th>
                  <th scope="col">endpoint</th>
                  <th scope="col">attempt</th>
                  <th scope="col">HTTP</th>
                  <th scope="col">latency</th>
                  <th scope="col">classification</th>
                </tr>
              </thead>
              <tbody>
                {r.recent_failed_deliveries.map((d) => (
                  <tr key={d.id}>
                    <td>
                      <When at={d.at} />
                    </td>
                    <td>
                      <Link to={`/endpoints/${enc(d.endpoint)}`}>{d.endpoint}</Link>
                    </td>
                    <td>{d.attempt}</td>
                    <td>{d.http_status || ""}</td>
                    <td>{d.latency_ms} ms</td>
                    <td>{d.classification}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </Section>
      )}
      <Events path={path} />
    </>
  );
}

function EffectiveConfig({ r }: { r: ResourceView }) {
  const cfg = useLive(() => effectiveConfig(r), [r.kind, r.kind_version, r.provider_config_ref], ["providerconfigs"]);
  return (
    <Section title="Config (effective)">
      <ProblemView error={cfg.error} />
      {cfg.data ? (
        <>
          <p className="muted">
            From provider config <Link to={`/providerconfigs?name=${enc(cfg.data.name)}`}>{cfg.data.name}</Link>
            {cfg.data.is_default ? " (the default)" : ""}.
          </p>
          <Json value={cfg.data.spec} label="effective config" />
        </>
      ) : (
        !cfg.loading && <p className="muted">No provider config: tasks carry none.</p>
      )}
    </Section>
  );
}

// Children shows the first page of the resource's children, without their
// specs and statuses (a page ends at the server's byte budget; the list of
// resources owned by it has them all, page by page).
function Children({ path, ownerId }: { path: string; ownerId: string }) {
  const kids = useLive(() => get<ChildList>(`${path}/children?fields=-spec,-status`), [path], ["resources"], 1000);
  const items = kids.data?.items ?? [];
  const more = !!kids.data?.next_cursor;
  return (
    <Section title={`Children (${items.length}${more ? "+" : ""})`}>
      <ProblemView error={kids.error} />
      {items.length === 0 ? (
        <p className="muted">It owns none.</p>
      ) : (
        <ul className="inline-list" aria-label="Children">
          {items.slice(0, 200).map((c) => (
            <li key={c.id}>
              <Link to={`/resources/${enc(c.kind)}/${enc(c.name)}`}>
                {c.kind}/{c.name}
              </Link>{" "}
              <PhaseBadge phase={c.phase} />
            </li>
          ))}
          {items.length > 200 && <li className="muted">… and {items.length - 200} more (see the graph)</li>}
          {more && (
            <li className="muted">
              … and more: <Link to={`/resources?owner=${enc(ownerId)}`}>all its children</Link>
            </li>
          )}
        </ul>
      )}
    </Section>
  );
}

function EdgeTable({ edges, side, label }: { edges: DepEdge[]; side: "dependency" | "dependent"; label: string }) {
  if (edges.length === 0) return <p className="muted">None.</p>;
  return (
    <div className="scroll">
      <table aria-label={label}>
        <thead>
          <tr>
            <th scope="col">{side}</th>
            <th scope="col">phase</th>
            <th scope="col">value flows</th>
          </tr>
        </thead>
        <tbody>
          {edges.map((e, i) => {
            const ref = e[side];
            return (
              <tr key={i}>
                <td>
                  <Link to={`/resources/${enc(ref.kind)}/${enc(ref.name)}`}>
                    {ref.kind}/{ref.name}
                  </Link>
                </td>
                <td>
                  <PhaseBadge phase={side === "dependency" ? e.dependency_phase : e.dependent_phase} />
                </td>
                <td>{(e.values ?? []).map((v) => `${v.source_field} → ${v.dependent_field}`).join("; ")}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

function Dependencies({ path }: { path: string }) {
  const deps = useLive(() => get<Dependencies>(`${path}/dependencies`), [path], ["resources"], 1000);
  return (
    <Section title="Dependencies and value flows">
      <ProblemView error={deps.error} />
      <h3>Depends on</h3>
      <EdgeTable edges={deps.data?.upstream ?? []} side="dependency" label="Depends on" />
      <h3>Depended on by</h3>
      <EdgeTable edges={deps.data?.downstream ?? []} side="dependent" label="Depended on by" />
    </Section>
  );
}

function Operations({ path, r, onDone }: { path: string; r: ResourceView; onDone: () => void }) {
  const ops = useLive(() => get<OperationList>(`${path}/ops?limit=20`), [path], ["resources"], 1000);
  const manifest = useLive(() => get<Manifest>(`/kinds/${enc(r.kind)}/versions/${r.kind_version}/manifest`), [r.kind, r.kind_version], ["kinds"]);
  const verbs = (manifest.data?.reactions ?? []).filter((x) => x.trigger === "operation" && x.verb).map((x) => x.verb!);
  const [verb, setVerb] = useState("");
  const [input, setInput] = useState("{}");
  const [err, setErr] = useState<unknown>();
  const invoke = async () => {
    setErr(undefined);
    try {
      await call("POST", `${path}/ops`, `{"verb":${JSON.stringify(verb || verbs[0])},"input":${input || "{}"}}`);
      ops.reload();
      onDone();
    } catch (e) {
      setErr(e);
    }
  };
  if (verbs.length === 0 && (ops.data?.items ?? []).length === 0) return null;
  return (
    <Section title="Operations">
      {verbs.length > 0 && (
        <form
          className="filters"
          onSubmit={(e) => {
            e.preventDefault();
            void invoke();
          }}
        >
          <label>
            verb
            <select value={verb || verbs[0]} onChange={(e) => setVerb(e.target.value)}>
              {verbs.map((v) => (
                <option key={v}>{v}</option>
              ))}
            </select>
          </label>
          <label>
            input (JSON)
            <input value={input} onChange={(e) => setInput(e.target.value)} />
          </label>
          <button type="submit">Run operation</button>
        </form>
      )}
      <ProblemView error={err} />
      <Json value={ops.data?.items} label="operations" />
    </Section>
  );
}

function Events({ path }: { path: string }) {
  const events = useLive(() => get<EventList>(`${path}/events?limit=50`), [path], ["resources"], 1000);
  return (
    <Section title="Events">
      <ProblemView error={events.error} />
      <div className="scroll">
        <table aria-label="Events">
          <thead>
            <tr>
              <th scope="col">at</th>
              <th scope="col">event</th>
              <th scope="col">generation</th>
              <th scope="col">by</th>
              <th scope="col">message</th>
            </tr>
          </thead>
          <tbody>
            {(events.data?.items ?? []).map((e) => (
              <tr key={e.id}>
                <td>
                  <When at={e.at} />
                </td>
                <td>{e.type}</td>
                <td>{e.generation ?? ""}</td>
                <td data-testid="event-actor">{e.actor}</td>
                <td>{e.message}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <button type="button" className="link" onClick={() => navigate(`/graph${path.slice("/resources".length)}`)}>
        See it in the graph
      </button>
    </Section>
  );
}
