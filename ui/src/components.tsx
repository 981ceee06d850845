import { useState, type ReactNode } from "react";
import { ApiError, staleVersion } from "./api";
import type { JSONSchema } from "./types";

export function PhaseBadge({ phase }: { phase: string }) {
  return (
    <span className={`phase phase-${phase.toLowerCase()}`} data-phase={phase}>
      {phase}
    </span>
  );
}

export function Json({ value, label }: { value: unknown; label: string }) {
  if (value === undefined || value === null) return <p className="muted">none</p>;
  return (
    <pre className="json" tabIndex={0} aria-label={label}>
      {JSON.stringify(value, null, 2)}
    </pre>
  );
}

export function Section({ title, children, id }: { title: string; children: ReactNode; id?: string }) {
  return (
    <section className="card" aria-labelledby={id ? `${id}-h` : undefined}>
      <h2 id={id ? `${id}-h` : undefined}>{title}</h2>
      {children}
    </section>
  );
}

export function Fields({ rows }: { rows: [string, ReactNode][] }) {
  return (
    <dl className="fields">
      {rows.map(([k, v]) => (
        <div key={k}>
          <dt>{k}</dt>
          <dd>{v === undefined || v === null || v === "" ? <span className="muted">—</span> : v}</dd>
        </div>
      ))}
    </dl>
  );
}

export function When({ at }: { at?: string }) {
  if (!at) return <span className="muted">—</span>;
  const d = new Date(at);
  return (
    <time dateTime={at} title={d.toISOString()}>
      {ago(d)}
    </time>
  );
}

export function ago(d: Date): string {
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  const abs = Math.abs(s);
  const unit = abs < 60 ? `${abs}s` : abs < 3600 ? `${Math.round(abs / 60)}m` : abs < 86400 ? `${Math.round(abs / 3600)}h` : `${Math.round(abs / 86400)}d`;
  return s >= 0 ? `${unit} ago` : `in ${unit}`;
}

// ProblemView shows an API refusal as the API states it: the detail, then
// each field error with its location, so that, say, the stability gate's
// 409 reads as one line per breaking change.
export function ProblemView({ error }: { error: unknown }) {
  if (!error) return null;
  if (!(error instanceof ApiError)) {
    return (
      <div className="problem" role="alert">
        <strong>Error:</strong> {String(error)}
      </div>
    );
  }
  const p = error.problem;
  return (
    <div className="problem" role="alert" data-problem-type={p.type}>
      <p>
        <strong>
          {p.status} {p.title}
        </strong>
        {p.type !== "about:blank" && <span className="muted"> ({p.type.replace("urn:converge:problem:", "")})</span>}
      </p>
      <p>{p.detail}</p>
      {staleVersion(p) && (
        <p data-testid="stale-version">
          Someone changed it since this page read it, so nothing was written: reload it to see their change, then redo yours.
        </p>
      )}
      {p.errors.length > 0 && (
        <table className="problem-errors">
          <thead>
            <tr>
              <th scope="col">field</th>
              <th scope="col">problem</th>
            </tr>
          </thead>
          <tbody>
            {p.errors.map((e, i) => (
              <tr key={i} data-location={e.location}>
                <td>
                  <code>{e.location}</code>
                </td>
                <td>
                  {e.message}
                  {e.keyword && <span className="muted"> ({e.keyword})</span>}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

function typeOf(s: JSONSchema): string {
  if (Array.isArray(s.type)) return s.type.join(" | ");
  if (s.type === "array" && s.items) return `array of ${typeOf(s.items)}`;
  if (s.type) return s.type;
  if (s.enum) return "enum";
  for (const k of ["oneOf", "anyOf", "allOf"]) if (s[k]) return k;
  return "any";
}

const constraintKeys = ["minimum", "maximum", "minLength", "maxLength", "pattern", "format", "minItems", "maxItems", "const"];

// SchemaView renders a JSON Schema's properties as a nested table: name,
// type, required, constraints and description. The raw schema is one click
// away.
export function SchemaView({ schema, label }: { schema?: JSONSchema; label: string }) {
  const [raw, setRaw] = useState(false);
  if (!schema || Object.keys(schema).length === 0) return <p className="muted">No {label}.</p>;
  const rows: ReactNode[] = [];
  const walk = (s: JSONSchema, prefix: string, depth: number) => {
    const req = new Set(s.required ?? []);
    for (const [name, p] of Object.entries(s.properties ?? {})) {
      const c = constraintKeys.filter((k) => p[k] !== undefined).map((k) => `${k} ${JSON.stringify(p[k])}`);
      if (p.enum) c.push(`one of ${p.enum.map((v) => JSON.stringify(v)).join(", ")}`);
      if (p.default !== undefined) c.push(`default ${JSON.stringify(p.default)}`);
      rows.push(
        <tr key={prefix + name}>
          <td style={{ paddingLeft: `${0.5 + depth * 1.2}rem` }}>
            <code>{name}</code>
          </td>
          <td>{typeOf(p)}</td>
          <td>{req.has(name) ? "required" : ""}</td>
          <td>{c.join("; ")}</td>
          <td>{p.description ?? ""}</td>
        </tr>,
      );
      if (p.properties) walk(p, `${prefix}${name}.`, depth + 1);
      if (p.items?.properties) walk(p.items, `${prefix}${name}[].`, depth + 1);
    }
  };
  walk(schema, "", 0);
  return (
    <div>
      {rows.length > 0 ? (
        <div className="scroll">
          <table aria-label={label}>
            <thead>
              <tr>
                <th scope="col">property</th>
                <th scope="col">type</th>
                <th scope="col">required</th>
                <th scope="col">constraints</th>
                <th scope="col">description</th>
              </tr>
            </thead>
            <tbody>{rows}</tbody>
          </table>
        </div>
      ) : (
        <p className="muted">{typeOf(schema)}, no declared properties.</p>
      )}
      <button type="button" className="link" onClick={() => setRaw(!raw)} aria-expanded={raw}>
        {raw ? "Hide" : "Show"} the raw schema
      </button>
      {raw && <Json value={schema} label={`${label} (raw)`} />}
    </div>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p className="muted" role="status">
      Loading {what}…
    </p>
  );
}

// PageSummary says how many items of noun a keyset page holds, which page
// it is, and whether it is the last.
export function PageSummary({ count, noun, page, last }: { count: number; noun: string; page: number; last: boolean }) {
  return (
    <p className="muted" aria-live="polite" data-testid="page-summary">
      {count} {noun}
      {count === 1 ? "" : "s"} · page {page}
      {last ? " (last)" : ""}
    </p>
  );
}

// Pager moves through a keyset-paged list: back while a cursor is set,
// on while the page has a next cursor.
export function Pager({ onPrev, canPrev, onNext, nextCursor }: { onPrev: () => void; canPrev: boolean; onNext: (cursor?: string) => void; nextCursor?: string }) {
  return (
    <nav className="pager" aria-label="Pages">
      <button type="button" onClick={onPrev} disabled={!canPrev}>
        ← Previous
      </button>
      <button type="button" onClick={() => onNext(nextCursor)} disabled={!nextCursor}>
        Next →
      </button>
    </nav>
  );
}
