import { useState } from "react";
import { call, enc, get } from "../api";
import { Fields, Loading, ProblemView, Section, When } from "../components";
import { useLive } from "../hooks";
import { NamespaceCell, NamespaceHead, objectLink } from "../namespace";
import { Link } from "../router";
import type { DeliveryList, Endpoint, EndpointList, EndpointTest, RotatedSecret } from "../types";
import { DeliveryTable } from "./Deliveries";

function target(e: Endpoint): string {
  return e.target.url ?? [e.target.function, e.target.region, e.target.invocation].filter(Boolean).join(" · ");
}

function Breaker({ e }: { e: Endpoint }) {
  const s = e.live?.breaker_state;
  if (!s) return <span className="muted">not dispatched here</span>;
  return <span className={`breaker breaker-${s}`}>{s}</span>;
}

function Health({ e }: { e: Endpoint }) {
  if (!e.live) return <span className="muted">—</span>;
  return (
    <ul className="inline-list">
      {e.live.kinds.map((k) => (
        <li key={`${k.kind}/${k.kind_version}`} className={k.ready ? "ok" : "bad"} title={k.reason ?? ""} data-pair={`${k.kind}/${k.kind_version}`} data-ready={k.ready}>
          {k.kind}/{k.kind_version}: {k.ready ? "ready" : `not ready${k.reason ? ` (${k.reason})` : ""}`}
        </li>
      ))}
    </ul>
  );
}

function rateText(e: Endpoint): string {
  if (e.rate_limit == null) return "unlimited";
  return `${e.rate_limit}/s, burst ${e.burst ?? ""}${e.rate_adaptive ? ", adaptive" : ""}`;
}

// RateLimit shows an endpoint's rate limit with the shared bucket's state,
// and edits it: the endpoint is applied again (POST /endpoints) with its
// other settings as they are, conditional on its resource_version.
function RateLimit({ e, reload }: { e: Endpoint; reload: () => void }) {
  const [rate, setRate] = useState<string | null>(null);
  const [burst, setBurst] = useState<string | null>(null);
  const [adaptive, setAdaptive] = useState<boolean | null>(null);
  const [error, setError] = useState<unknown>();
  const [result, setResult] = useState("");
  const vRate = rate ?? (e.rate_limit == null ? "" : String(e.rate_limit));
  const vBurst = burst ?? (e.burst == null ? "" : String(e.burst));
  const vAdaptive = adaptive ?? !!e.rate_adaptive;
  const edited = rate !== null || burst !== null || adaptive !== null;
  const save = async () => {
    setError(undefined);
    const body = {
      name: e.name,
      kinds: e.kinds,
      target: e.target,
      health: e.health,
      max_concurrency: e.max_concurrency,
      max_batch: e.max_batch,
      request_timeout_secs: e.request_timeout_secs,
      enabled: e.enabled,
      rate_limit: vRate.trim() === "" ? undefined : Number(vRate),
      burst: vBurst.trim() === "" ? undefined : Number(vBurst),
      rate_adaptive: vAdaptive || undefined,
      resource_version: e.resource_version,
    };
    try {
      const a = await call<Endpoint>("POST", "/endpoints", body);
      setResult(a.headers.get("X-Apply-Result") ?? "saved");
      setRate(null);
      setBurst(null);
      setAdaptive(null);
      reload();
    } catch (err) {
      setError(err);
    }
  };
  const st = e.rate_state;
  return (
    <Section title="Rate limit">
      <Fields
        rows={[
          ["rate limit", <span data-testid="rate-limit">{rateText(e)}</span>],
          ["effective rate", st ? <span data-testid="effective-rate">{`${Math.round(st.effective_rate * 100) / 100}/s`}</span> : undefined],
          ["lowered by a throttle", st?.lowered_at ? <When at={st.lowered_at} /> : undefined],
          ["requests that waited", st ? <span data-testid="rate-waited">{st.waited}</span> : undefined],
          ["throttles (429s)", st ? <span data-testid="rate-throttles">{st.throttles}</span> : undefined],
        ]}
      />
      <p className="muted">Requests per second across every dispatch pod; a batch is one request. Empty = unlimited; burst empty = the rate, rounded up.</p>
      <form
        className="filters"
        aria-label="Rate limit"
        onSubmit={(ev) => {
          ev.preventDefault();
          void save();
        }}
      >
        <label>
          rate limit /s <input type="number" name="rate_limit" min={0} step="any" value={vRate} onChange={(ev) => setRate(ev.target.value)} />
        </label>
        <label>
          burst <input type="number" name="burst" min={1} step={1} value={vBurst} onChange={(ev) => setBurst(ev.target.value)} />
        </label>
        <label>
          <input type="checkbox" name="rate_adaptive" checked={vAdaptive} onChange={(ev) => setAdaptive(ev.target.checked)} /> adaptive (a 429 halves
          it; back within 60 s)
        </label>
        <button type="submit" disabled={!edited}>
          Save rate limit
        </button>
      </form>
      <p aria-live="polite">{result}</p>
      <ProblemView error={error} />
    </Section>
  );
}

export function Endpoints() {
  const list = useLive(() => get<EndpointList>("/endpoints"), [], ["endpoints"]);
  const items = list.data?.items ?? [];
  return (
    <>
      <h1>Endpoints</h1>
      <p className="muted">Where the dispatcher delivers tasks; the live columns are this pod's view.</p>
      <ProblemView error={list.error} />
      {list.loading && !list.data && <Loading what="endpoints" />}
      <div className="scroll">
        <table aria-label="Endpoints">
          <thead>
            <tr>
              <NamespaceHead />
              <th scope="col">name</th>
              <th scope="col">target</th>
              <th scope="col">health per kind</th>
              <th scope="col">breaker</th>
              <th scope="col">in flight / max</th>
              <th scope="col">enabled</th>
            </tr>
          </thead>
          <tbody>
            {items.map((e) => (
              <tr key={e.name} data-endpoint={e.name}>
                <NamespaceCell ns={e.namespace} />
                <td>
                  <Link to={objectLink(`/endpoints/${enc(e.name)}`, e.namespace)}>{e.name}</Link>
                </td>
                <td>
                  {e.target.type}: {target(e)}
                </td>
                <td>
                  <Health e={e} />
                </td>
                <td>
                  <Breaker e={e} />
                </td>
                <td>
                  {e.live?.in_flight ?? 0} / {e.max_concurrency}
                </td>
                <td>{e.enabled ? "yes" : `no${e.disabled_reason ? ` (${e.disabled_reason})` : ""}`}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {list.data && items.length === 0 && <p>No endpoint is registered.</p>}
    </>
  );
}

export function EndpointDetail({ name }: { name: string }) {
  const path = `/endpoints/${enc(name)}`;
  const ep = useLive(() => get<Endpoint>(path), [path], ["endpoints", "resources"], 1000);
  const deliveries = useLive(() => get<DeliveryList>(`${path}/deliveries?failed=true&limit=50`), [path], ["resources"], 2000);
  const failed = deliveries.data?.items ?? [];
  const [secret, setSecret] = useState<RotatedSecret | null>(null);
  const [error, setError] = useState<unknown>();
  const rotate = async () => {
    if (!window.confirm(`Rotate the signing secret of ${name}? The old one keeps signing for 24 hours.`)) return;
    setError(undefined);
    try {
      setSecret((await call<RotatedSecret>("POST", `${path}/rotate-secret`)).data);
    } catch (e) {
      setError(e);
    }
  };
  const [test, setTest] = useState<EndpointTest | null>(null);
  const [testing, setTesting] = useState(false);
  const sendTest = async () => {
    setError(undefined);
    setTesting(true);
    try {
      setTest((await call<EndpointTest>("POST", `${path}/test-delivery`)).data);
    } catch (e) {
      setError(e);
    } finally {
      setTesting(false);
    }
  };
  const e = ep.data;
  return (
    <>
      <p className="crumbs">
        <Link to="/endpoints">Endpoints</Link> / {name}
      </p>
      <h1>{name}</h1>
      <ProblemView error={ep.error ?? error} />
      {ep.loading && !e && <Loading what="the endpoint" />}
      {e && (
        <>
          <div className="actions">
            <button type="button" onClick={() => void rotate()}>
              Rotate secret
            </button>{" "}
            <button type="button" onClick={() => void sendTest()} disabled={testing}>
              Send test delivery
            </button>{" "}
            <Link to={`/deliveries?endpoint=${enc(name)}`}>All its deliveries</Link>
          </div>
          {test && (
            <section className="card" data-testid="test-delivery" data-classification={test.classification} aria-labelledby="test-h">
              <h2 id="test-h">Test delivery: {test.classification === "ok" ? "answered" : "failed"}</h2>
              <p className="muted">
                The signed health request every SDK answers without doing any work ({"{"}"type":"health"{"}"} to the health target). It
                moves neither readiness nor the breaker and is not logged.
              </p>
              <Fields
                rows={[
                  ["sent", <When at={test.at} />],
                  ["HTTP status", test.http_status || "no answer"],
                  ["latency", `${test.latency_ms} ms`],
                  ["classification", <span className={test.classification === "ok" ? "ok" : "bad"}>{test.classification}</span>],
                  [
                    "readiness reported",
                    test.ready
                      ? Object.entries(test.ready)
                          .map(([pair, ok]) => `${pair}: ${ok ? "ready" : "not ready"}`)
                          .join(", ")
                      : undefined,
                  ],
                  ["error", test.error],
                  ["answer excerpt", test.excerpt ? <code className="excerpt">{test.excerpt}</code> : undefined],
                ]}
              />
            </section>
          )}
          {secret && (
            <div className="secret card" role="alert" data-testid="new-secret">
              <h2>New signing secret: shown once</h2>
              <p>Give it to the provider now; it is never shown again. The previous secret keeps signing until <When at={secret.previous_valid_until} />.</p>
              <code className="secret-value">{secret.secret}</code>{" "}
              <button type="button" onClick={() => void navigator.clipboard?.writeText(secret.secret)}>
                Copy
              </button>{" "}
              <button type="button" onClick={() => setSecret(null)}>
                I stored it
              </button>
            </div>
          )}
          <div className="grid">
            <Section title="Endpoint">
              <Fields
                rows={[
                  ["target", `${e.target.type}: ${target(e)}`],
                  ["health probe", e.health.url ?? e.health.type],
                  ["max concurrency", e.max_concurrency],
                  ["rate limit", rateText(e)],
                  ["request timeout", `${e.request_timeout_secs} s`],
                  ["enabled", e.enabled ? "yes" : `no ${e.disabled_reason ?? ""}`],
                  ["secret rotation ends", e.secret_rotation_ends_at ? <When at={e.secret_rotation_ends_at} /> : undefined],
                ]}
              />
            </Section>
            <Section title="Live (this pod)">
              {e.live ? (
                <Fields
                  rows={[
                    ["breaker", <Breaker e={e} />],
                    ["in flight / max", <span data-testid="inflight">{`${e.live.in_flight} / ${e.max_concurrency} (limit now ${e.live.limit})`}</span>],
                    [
                      "rate (this pod)",
                      e.live.rate_limit
                        ? `${Math.round((e.live.effective_rate ?? 0) * 100) / 100}/s effective, ${e.live.rate_tokens ?? 0} tokens held, ${e.live.rate_waited ?? 0} sent after waiting`
                        : undefined,
                    ],
                    ["backing off until", e.live.backoff_until ? <When at={e.live.backoff_until} /> : undefined],
                    ["back-off reason", e.live.backoff_reason],
                    ["last probe", <When at={e.live.last_probe} />],
                    ["probe error", e.live.probe_error],
                    ["unusable", e.live.unusable],
                  ]}
                />
              ) : (
                <p className="muted">No dispatcher runs in this process.</p>
              )}
            </Section>
          </div>
          <RateLimit e={e} reload={ep.reload} />
          <Section title="Health per kind">
            <Health e={e} />
          </Section>
        </>
      )}
      <Section title="Recent failed deliveries">
        <ProblemView error={deliveries.error} />
        <DeliveryTable items={failed} label="Recent failed deliveries" />
        {deliveries.data && failed.length === 0 && <p className="muted">No failed delivery.</p>}
      </Section>
    </>
  );
}
