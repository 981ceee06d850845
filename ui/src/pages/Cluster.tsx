import { get } from "../api";
import { Loading, ProblemView, When } from "../components";
import { useLive, usePoll } from "../hooks";
import type { MemberList } from "../types";

export function Cluster() {
  const list = useLive(() => get<MemberList>("/cluster-members"), [], ["cluster"]);
  // A crash fires no NOTIFY: liveness is a heartbeat's age, so re-read it
  // every 10 s while the page is visible (0.1 request a second).
  usePoll(list.reload, 10000);
  return (
    <>
      <h1>Cluster</h1>
      <ProblemView error={list.error} />
      {list.loading && !list.data && <Loading what="members" />}
      <div className="scroll">
        <table aria-label="Cluster members">
          <thead>
            <tr>
              <th scope="col">member</th>
              <th scope="col">role</th>
              <th scope="col">status</th>
              <th scope="col">shards</th>
              <th scope="col">in flight</th>
              <th scope="col">version</th>
              <th scope="col">host / pid</th>
              <th scope="col">started</th>
              <th scope="col">last heartbeat</th>
            </tr>
          </thead>
          <tbody>
            {(list.data?.items ?? []).map((m) => (
              <tr key={m.member_id} className={m.ready ? "" : "stale"} data-member={m.member_id}>
                <td>{m.member_id}</td>
                <td>{m.role}</td>
                <td>{m.ready ? <span className="ok">Ready</span> : <span className="bad">NotReady</span>}</td>
                <td>{m.shard_lo !== undefined && m.shard_hi !== undefined ? `${m.shard_lo}–${m.shard_hi}` : "—"}</td>
                <td>{m.in_flight}</td>
                <td>{m.version}</td>
                <td>
                  {m.host} / {m.pid}
                </td>
                <td>
                  <When at={m.started_at} />
                </td>
                <td>
                  <When at={m.last_heartbeat} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}
