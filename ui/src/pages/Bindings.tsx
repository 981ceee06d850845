import { useState } from "react";
import { get } from "../api";
import { Loading, ProblemView } from "../components";
import { useLive } from "../hooks";
import { NamespaceCell, NamespaceHead } from "../namespace";
import type { Binding, BindingList } from "../types";
import { DocEditor, deleteDoc } from "./Documents";

export function Bindings() {
  // The bindings topic (reactor_bindings_changed) announces every write,
  // this tab's and anyone's; subscribing also opens the change stream.
  const list = useLive(() => get<BindingList>("/reactor-bindings"), [], ["bindings"]);
  const items = list.data?.items ?? [];
  const [editing, setEditing] = useState<Binding | "new" | null>(null);
  const [error, setError] = useState<unknown>();
  return (
    <>
      <h1>Reactor bindings</h1>
      <p className="muted">Each calls a reactor kind when a resource of the watched kind crosses a lifecycle transition.</p>
      <ProblemView error={list.error ?? error} />
      <DocEditor
        collection="/reactor-bindings"
        noun="reactor binding"
        template={{ name: "", watch_kind: "", transition: "synced", reactor: "", label_match: {}, enabled: true }}
        editing={editing}
        setEditing={setEditing}
        onChanged={list.reload}
      >
        {list.loading && !list.data && <Loading what="bindings" />}
        <div className="scroll">
          <table aria-label="Reactor bindings">
            <thead>
              <tr>
                <NamespaceHead />
                <th scope="col">name</th>
                <th scope="col">watches</th>
                <th scope="col">transition</th>
                <th scope="col">reactor</th>
                <th scope="col">labels</th>
                <th scope="col">enabled</th>
                <th scope="col">actions</th>
              </tr>
            </thead>
            <tbody>
              {items.map((b) => (
                <tr key={b.name} data-binding={b.name}>
                  <NamespaceCell ns={b.namespace} />
                  <td>{b.name}</td>
                  <td>
                    {b.watch_kind}
                    {b.watch_kind_version ? `/${b.watch_kind_version}` : ""}
                  </td>
                  <td>{b.transition}</td>
                  <td>
                    {b.reactor}
                    {b.reactor_version ? `/${b.reactor_version}` : ""}
                  </td>
                  <td>
                    {Object.entries(b.label_match ?? {})
                      .map(([k, v]) => `${k}=${v}`)
                      .join(", ") || "all"}
                  </td>
                  <td>{b.enabled ? "yes" : "no"}</td>
                  <td>
                    <button type="button" onClick={() => setEditing(b)}>
                      Edit
                    </button>{" "}
                    <button type="button" className="danger" onClick={async () => { setError(await deleteDoc("/reactor-bindings", b.name, b.resource_version, b.namespace)); list.reload(); }}>
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
        {list.data && items.length === 0 && <p>No binding.</p>}
      </DocEditor>
    </>
  );
}
