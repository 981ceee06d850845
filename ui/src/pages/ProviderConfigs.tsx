import { useState } from "react";
import { get } from "../api";
import { Json, Loading, ProblemView } from "../components";
import { useLive } from "../hooks";
import { NamespaceCell, NamespaceHead } from "../namespace";
import { useLocation } from "../router";
import type { ProviderConfig, ProviderConfigList } from "../types";
import { DocEditor, deleteDoc } from "./Documents";

// shown is how many provider configs the page lists at most.
const shown = 1000;

// firstConfigs reads the first provider configs of kind ("" for every
// kind), following next_cursor: a page may end before its limit, at the
// server's byte budget.
async function firstConfigs(kind: string): Promise<ProviderConfigList> {
  const items: ProviderConfig[] = [];
  let cursor = "";
  do {
    const q = new URLSearchParams({ limit: String(shown - items.length) });
    if (kind) q.set("kind", kind);
    if (cursor) q.set("cursor", cursor);
    const page = await get<ProviderConfigList>(`/providerconfigs?${q.toString()}`);
    items.push(...(page.items ?? []));
    cursor = page.next_cursor ?? "";
  } while (cursor && items.length < shown);
  return { items };
}

export function ProviderConfigs() {
  const search = useLocation().searchParams;
  const kind = search.get("kind") ?? "";
  const only = search.get("name") ?? "";
  const list = useLive(() => firstConfigs(kind), [kind], ["providerconfigs"]);
  const [editing, setEditing] = useState<ProviderConfig | "new" | null>(null);
  const [error, setError] = useState<unknown>();
  const items = (list.data?.items ?? []).filter((c) => !only || c.name === only);
  return (
    <>
      <h1>Provider configs{kind ? ` of ${kind}` : ""}</h1>
      <p className="muted">Runtime documents for a kind version, validated against its config schema: one default, and overrides a resource attaches.</p>
      <ProblemView error={list.error ?? error} />
      <DocEditor
        collection="/providerconfigs"
        noun="provider config"
        template={{ name: "", kind: "", kind_version: 1, is_default: true, spec: {} }}
        editing={editing}
        setEditing={setEditing}
        onChanged={list.reload}
      >
        {list.loading && !list.data && <Loading what="provider configs" />}
        <div className="scroll">
          <table aria-label="Provider configs">
            <thead>
              <tr>
                <NamespaceHead />
                <th scope="col">name</th>
                <th scope="col">kind</th>
                <th scope="col">default</th>
                <th scope="col">spec</th>
                <th scope="col">actions</th>
              </tr>
            </thead>
            <tbody>
              {items.map((c) => (
                <tr key={c.name} data-config={c.name}>
                  <NamespaceCell ns={c.namespace} />
                  <td>{c.name}</td>
                  <td>
                    {c.kind}/{c.kind_version}
                  </td>
                  <td>{c.is_default ? "default" : "override"}</td>
                  <td>
                    <Json value={c.spec} label={`spec of ${c.name}`} />
                  </td>
                  <td>
                    <button type="button" onClick={() => setEditing(c)}>
                      Edit
                    </button>{" "}
                    <button type="button" className="danger" onClick={async () => { setError(await deleteDoc("/providerconfigs", c.name, c.resource_version, c.namespace)); list.reload(); }}>
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
        {list.data && items.length === 0 && <p>No provider config.</p>}
      </DocEditor>
    </>
  );
}
