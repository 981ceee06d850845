import { useState, type ReactNode } from "react";
import { ApiError, call, enc, ifMatch, staleVersion } from "../api";
import { ProblemView, Section } from "../components";
import { atNamespace } from "../namespace";

// DocEditor creates, edits and deletes one kind of named document (provider
// configs, reactor bindings) through its apply route: POST upserts by name,
// DELETE removes. The document is edited as JSON, exactly what the API
// takes, and a refusal is shown field by field. An edited document keeps
// the resource_version it was read at, so an apply after someone else's
// change is refused (409) instead of overwriting it; the list then re-reads
// to show their change. A document that names its namespace is applied
// there (the one it was read from, under "All namespaces").
export function DocEditor<T extends { name: string }>({
  collection,
  noun,
  template,
  editing,
  setEditing,
  onChanged,
  children,
}: {
  collection: string;
  noun: string;
  template: object;
  editing: T | "new" | null;
  setEditing: (d: T | "new" | null) => void;
  onChanged: () => void;
  children?: ReactNode;
}) {
  const [text, setText] = useState("");
  const [shown, setShown] = useState<T | "new" | null>(null);
  const [error, setError] = useState<unknown>();
  const [result, setResult] = useState("");
  if (editing !== shown) {
    setShown(editing);
    setError(undefined);
    setText(editing === null ? "" : JSON.stringify(editing === "new" ? template : stripServer(editing), null, 2));
  }
  const apply = async () => {
    setError(undefined);
    try {
      const a = await call<T>("POST", atNamespace(collection, namespaceIn(text)), text);
      setResult(`${a.data.name}: ${a.headers.get("X-Apply-Result") ?? "applied"}`);
      setEditing(null);
      onChanged();
    } catch (e) {
      setError(e);
      if (e instanceof ApiError && staleVersion(e.problem)) onChanged();
    }
  };
  return (
    <>
      <div className="actions">
        <button type="button" onClick={() => setEditing("new")}>
          New {noun}
        </button>
      </div>
      <p aria-live="polite" data-testid="doc-result">
        {result}
      </p>
      {children}
      {editing !== null && (
        <Section title={editing === "new" ? `New ${noun}` : `Edit ${editing.name}`} id="doc-editor">
          <label className="block">
            {noun} (JSON)
            <textarea rows={12} value={text} onChange={(e) => setText(e.target.value)} spellCheck={false} data-testid="doc-text" />
          </label>
          <div className="actions">
            <button type="button" onClick={() => void apply()}>
              Apply
            </button>
            <button type="button" onClick={() => setEditing(null)}>
              Cancel
            </button>
          </div>
          <ProblemView error={error} />
        </Section>
      )}
    </>
  );
}

// namespaceIn is the namespace a JSON document names, if any.
function namespaceIn(text: string): string | undefined {
  try {
    const ns = (JSON.parse(text) as { namespace?: unknown }).namespace;
    return typeof ns === "string" && ns ? ns : undefined;
  } catch {
    return undefined; // the server says what is wrong with it
  }
}

function stripServer<T>(d: T): T {
  const { created_at: _c, updated_at: _u, owner_id: _o, ...rest } = d as Record<string, unknown>;
  return rest as T;
}

// deleteDoc deletes the document, of the namespace ns, at the version the
// page shows: one changed since is not deleted unseen (412).
export async function deleteDoc(collection: string, name: string, version?: number, ns?: string): Promise<unknown> {
  if (!window.confirm(`Delete ${name}?`)) return undefined;
  try {
    await call("DELETE", atNamespace(`${collection}/${enc(name)}`, ns), undefined, ifMatch(version));
    return undefined;
  } catch (e) {
    return e;
  }
}
