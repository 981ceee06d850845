import { hierarchy, tree, type HierarchyNode } from "d3-hierarchy";
import Graphology from "graphology";
import { useEffect, useMemo, useRef, useState, type FormEvent, type KeyboardEvent } from "react";
import Sigma from "sigma";
import { drawDiscNodeLabel, type NodeLabelDrawingFunction } from "sigma/rendering";
import { enc, get } from "../api";
import { Loading, PhaseBadge, ProblemView } from "../components";
import { useLive } from "../hooks";
import { objectLink } from "../namespace";
import { Link, navigate } from "../router";
import { phases, type ManifestList, type Phase, type ResourceList, type Topology, type TopologyNode } from "../types";

// Phase colours, distinct in both themes and for the common colour-vision
// deficiencies (blue/orange for the two busiest, Reconciling and Ready,
// would be safest; green for Ready is what operators expect, so Ready and
// Failed also differ in lightness).
export const phaseColor: Partial<Record<string, string>> = {
  Ready: "#2da44e",
  Reconciling: "#3b82f6",
  Degraded: "#d4a72c",
  Failed: "#d1242f",
  Orphaned: "#8c959f",
  Quarantined: "#8250df",
  Deleting: "#e16f24",
} satisfies Record<Phase, string>;
// Kind colours: Okabe and Ito's palette for colour-vision deficiencies,
// then more, assigned to the tree's kinds in name order (the same tree
// always gets the same colours); past the palette they repeat.
const kindPalette = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#8c6d31", "#6b6ecf", "#bcbd22", "#17becf"];
const dimmed = "#8c959f40";
const ownerEdge = "#8c959f99";
const depEdge = "#e16f24aa";

// Tree is GET …/topology with its lists present (the document allows
// null): nodes with their owner as an index (-1 for the root, first),
// dependency edges as [dependent, dependency] indexes.
interface Tree {
  nodes: TopologyNode[];
  edges: [number, number][];
}

const treeOf = (t: Topology): Tree => ({ nodes: t.nodes ?? [], edges: (t.edges ?? []).filter((e) => e !== null) });

const key = (n: { kind: string; name: string }) => `${n.kind}/${n.name}`;

// depLevels gives each node its dependency depth inside the tree: 0 for a
// node that depends on nothing here, else one more than its deepest
// dependency (a cycle counts once).
function depLevels(t: Tree): number[] {
  const deps: number[][] = t.nodes.map(() => []);
  for (const [a, b] of t.edges) deps[a].push(b);
  const level: (number | undefined)[] = [];
  const visiting = new Set<number>();
  const of = (i: number): number => {
    const known = level[i];
    if (known !== undefined) return known;
    if (visiting.has(i)) return 0;
    visiting.add(i);
    let l = 0;
    for (const d of deps[i]) l = Math.max(l, of(d) + 1);
    visiting.delete(i);
    level[i] = l;
    return l;
  };
  return t.nodes.map((_, i) => of(i));
}

// layout places the owned tree radially from the root (d3-hierarchy's tidy
// tree on a circle), computed from the structure in one pass: 5,000 nodes
// take milliseconds and the same tree always looks the same, where a force
// layout would take seconds and move on every update. Siblings are ordered
// by name, so the resources of one team sit together, and pushed outwards
// by their dependency depth, so a dependency edge is a short step out.
function layout(t: Tree): { x: number; y: number; depth: number }[] {
  const levels = depLevels(t);
  const kids: number[][] = t.nodes.map(() => []);
  t.nodes.forEach((n, i) => {
    if (i > 0) kids[n.owner >= 0 ? n.owner : 0].push(i);
  });
  for (const list of kids) list.sort((a, b) => t.nodes[a].name.localeCompare(t.nodes[b].name) || t.nodes[a].kind.localeCompare(t.nodes[b].kind));
  const root = hierarchy<number>(0, (i) => kids[i]);
  const ring = 100;
  const laid = tree<number>()
    .size([2 * Math.PI, ring * Math.max(1, root.height)])
    .separation((a, b) => (a.parent === b.parent ? 1 : 2) / Math.max(1, a.depth))(root);
  const maxLevel = Math.max(0, ...levels);
  const out: { x: number; y: number; depth: number }[] = [];
  laid.each((n: HierarchyNode<number> & { x?: number; y?: number }) => {
    const angle = n.x ?? 0;
    const lift = n.depth === 0 ? 0 : (levels[n.data] / (maxLevel + 1)) * ring * 0.8;
    const r = (n.y ?? 0) + lift;
    out[n.data] = { x: r * Math.cos(angle - Math.PI / 2), y: r * Math.sin(angle - Math.PI / 2), depth: n.depth };
  });
  return out;
}

// kindColors maps each kind of the tree to its colour.
function kindColors(t: Tree): Map<string, string> {
  const kinds = [...new Set(t.nodes.map((n) => n.kind))].sort();
  return new Map(kinds.map((k, i) => [k, kindPalette[i % kindPalette.length]]));
}

type ColorBy = "phase" | "kind";

const nodeColor = (n: TopologyNode, by: ColorBy, kinds: Map<string, string>) => (by === "kind" ? kinds.get(n.kind) : phaseColor[n.phase]) ?? "#999";

// Box is a drawn label's rectangle in viewport pixels.
interface Box {
  x: number;
  y: number;
  w: number;
  h: number;
}

const overlaps = (a: Box, b: Box) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;

// labelPlacer draws a label only where it overlaps none drawn before it in
// the same frame (sigma offers labels biggest node first, so a root's or a
// child's name wins over a grandchild's); the rest appear on hover or as
// the view zooms in and they spread apart. boxes holds this frame's drawn
// labels; reset it before each render.
function labelPlacer(boxes: Box[]): NodeLabelDrawingFunction {
  return (ctx, data, settings) => {
    if (!data.label) return;
    ctx.font = `${settings.labelWeight} ${settings.labelSize}px ${settings.labelFont}`;
    const b = { x: data.x + data.size + 3, y: data.y - settings.labelSize * 0.7, w: ctx.measureText(data.label).width, h: settings.labelSize * 1.05 };
    if (boxes.some((o) => overlaps(o, b))) return;
    boxes.push(b);
    drawDiscNodeLabel(ctx, data, settings);
  };
}

function build(t: Tree, showDeps: boolean, showOwners: boolean, by: ColorBy): Graphology {
  const kinds = kindColors(t);
  const g = new Graphology({ multi: false, type: "directed" });
  const pos = layout(t);
  const large = t.nodes.length > 1000;
  t.nodes.forEach((n, i) => {
    const p = pos[i] ?? { x: 0, y: 0, depth: 1 };
    const size = p.depth === 0 ? 12 : p.depth === 1 ? (large ? 6 : 9) : large ? 2.5 : 6;
    g.addNode(key(n), { x: p.x, y: p.y, size, label: key(n), color: nodeColor(n, by, kinds), phase: n.phase, kind: n.kind });
  });
  if (showOwners) {
    t.nodes.forEach((n, i) => {
      if (n.owner >= 0) g.mergeEdge(key(t.nodes[n.owner]), key(t.nodes[i]), { color: ownerEdge, size: 1, dep: false });
    });
  }
  if (showDeps) {
    for (const [a, b] of t.edges) {
      const ka = key(t.nodes[a]);
      const kb = key(t.nodes[b]);
      // Arrow heads are a second program to draw: past 1,000 nodes, lines.
      if (!g.hasEdge(ka, kb)) g.addEdge(ka, kb, { color: depEdge, size: 1, dep: true, type: large ? "line" : "arrow" });
    }
  }
  return g;
}

// bitmapPan makes a drag move the rendered image (a CSS translate of the
// layer sigma draws in) and re-renders once, at the new camera, on release.
// A drag re-rendering every frame redraws a tree of thousands of nodes per
// frame, far too slow on a software-rendered WebGL (no GPU; headless
// Chromium's SwiftShader), where a translate is only composited. While a
// drag lasts its mouse moves stop before sigma's document listener (this
// one captures on the window), so neither the camera nor the hover
// re-renders. It returns a function that says, once, whether the click
// ending a drag is to be ignored.
function bitmapPan(s: Sigma, box: HTMLElement, layer: HTMLElement): () => boolean {
  let pan: { x: number; y: number; dx: number; dy: number } | null = null;
  let panned = false;
  const down = (e: MouseEvent) => {
    if (e.button === 0) pan = { x: e.clientX, y: e.clientY, dx: 0, dy: 0 };
  };
  const move = (e: MouseEvent) => {
    if (!pan) return;
    if ((e.buttons & 1) === 0) return end();
    e.stopPropagation();
    pan.dx = e.clientX - pan.x;
    pan.dy = e.clientY - pan.y;
    layer.style.transform = `translate(${pan.dx}px, ${pan.dy}px)`;
  };
  const end = () => {
    if (!pan) return;
    const { dx, dy } = pan;
    pan = null;
    layer.style.transform = "";
    if (Math.abs(dx) + Math.abs(dy) < 4) return; // a click, not a drag
    panned = true;
    const a = s.viewportToFramedGraph({ x: 0, y: 0 });
    const b = s.viewportToFramedGraph({ x: dx, y: dy });
    const c = s.getCamera();
    c.setState({ x: c.x + a.x - b.x, y: c.y + a.y - b.y });
  };
  box.addEventListener("mousedown", down, true);
  window.addEventListener("mousemove", move, true);
  window.addEventListener("mouseup", end, true);
  s.on("kill", () => {
    box.removeEventListener("mousedown", down, true);
    window.removeEventListener("mousemove", move, true);
    window.removeEventListener("mouseup", end, true);
  });
  return () => {
    const was = panned;
    panned = false;
    return was;
  };
}

// detail is the level of detail for a tree of n nodes, set again whenever
// the tree is rebuilt (a converging BOM starts small): past 300 nodes
// names appear only once zoomed in, fewer and further apart (long names
// overlap), and a large tree drops edges and names while the camera moves.
function detail(n: number) {
  const large = n > 2000;
  return {
    labelRenderedSizeThreshold: n > 300 ? 14 : 4,
    labelDensity: large ? 0.2 : 0.5,
    labelGridCellSize: large ? 300 : 120,
    hideEdgesOnMove: large,
    hideLabelsOnMove: large,
  };
}

export function Graph({ kind, name }: { kind?: string; name?: string }) {
  if (!kind || !name) return <RootPicker />;
  return <GraphView kind={kind} name={name} key={`${kind}/${name}`} />;
}

function GraphView({ kind, name }: { kind: string; name: string }) {
  const path = `/resources/${enc(kind)}/${enc(name)}`;
  // The graph is the heaviest read: at most one a second while it converges.
  const doc = useLive(() => get<Topology>(`${path}/topology`).then(treeOf), [path], ["resources"], 1000);
  const box = useRef<HTMLDivElement>(null);
  const layer = useRef<HTMLDivElement>(null);
  const sigma = useRef<Sigma | null>(null);
  const shape = useRef("");
  const [showDeps, setShowDeps] = useState(true);
  // Level of detail: past 2,000 nodes the owner edges (the rings already
  // show who owns what) start hidden, halving what a frame draws.
  const [showOwners, setShowOwners] = useState<boolean | null>(null);
  const [selected, setSelected] = useState<string | null>(null);
  const [ready, setReady] = useState<number | null>(null);
  const [renderError, setRenderError] = useState<unknown>();
  const [find, setFind] = useState("");
  const [colorBy, setColorBy] = useState<ColorBy>("phase");

  // Build or update the rendered graph from each new answer: when the set
  // of nodes and edges is unchanged only colours change (no re-layout);
  // otherwise the graph is rebuilt and the camera kept.
  useEffect(() => {
    const d = doc.data;
    if (!d || d.nodes.length === 0 || !layer.current) return;
    const owners = showOwners ?? d.nodes.length <= 2000;
    const sig = `${colorBy}|${showDeps}|${owners}|${d.nodes.map((n) => `${key(n)}<${n.owner}`).join(",")}|${d.edges.length}`;
    try {
      if (sigma.current && shape.current === sig) {
        const g = sigma.current.getGraph();
        for (const n of d.nodes) {
          const k = key(n);
          if (g.getNodeAttribute(k, "phase") !== n.phase) g.mergeNodeAttributes(k, colorBy === "phase" ? { phase: n.phase, color: phaseColor[n.phase] } : { phase: n.phase });
        }
        return;
      }
      performance.mark("graph:fetched");
      const g = build(d, showDeps, owners, colorBy);
      performance.mark("graph:laid-out");
      shape.current = sig;
      if (sigma.current) {
        const cam = sigma.current.getCamera().getState();
        sigma.current.setGraph(g);
        sigma.current.setSettings(detail(d.nodes.length));
        sigma.current.getCamera().setState(cam);
      } else {
        const boxes: Box[] = [];
        const s = new Sigma(g, layer.current!, {
          ...detail(d.nodes.length),
          defaultDrawNodeLabel: labelPlacer(boxes),
          renderEdgeLabels: false,
          zIndex: true,
          minCameraRatio: 0.01,
          maxCameraRatio: 4,
          defaultEdgeType: "line",
          labelColor: { attribute: "labelColor", color: getComputedStyle(document.documentElement).getPropertyValue("--fg").trim() || "#222" },
        });
        const ignoreClick = bitmapPan(s, box.current!, layer.current!);
        s.on("clickNode", ({ node }) => ignoreClick() || setSelected(node));
        s.on("clickStage", () => ignoreClick() || setSelected(null));
        sigma.current = s;
        s.on("beforeRender", () => {
          boxes.length = 0;
        });
        // What this frame shows, for the browser tests: the drawn labels'
        // boxes and the nodes the selection's neighbourhood keeps lit.
        s.on("afterRender", () => {
          const el = box.current;
          if (!el) return;
          el.dataset.labels = JSON.stringify(boxes.map((b) => [b.x, b.y, b.w, b.h].map(Math.round)));
          // Read from what the reducers drew, and only with a selection: a
          // walk of every node per frame is no cost to pay without one.
          el.dataset.neighbourhood = s.getSetting("nodeReducer")
            ? JSON.stringify(
                s
                  .getGraph()
                  .filterNodes((n) => s.getNodeDisplayData(n)?.color !== dimmed)
                  .sort(),
              )
            : "";
        });
        s.once("afterRender", () => {
          performance.mark("graph:rendered");
          setReady(Math.round(performance.now()));
        });
        s.refresh();
      }
    } catch (e) {
      setRenderError(e);
    }
  }, [doc.data, showDeps, showOwners, colorBy]);

  useEffect(
    () => () => {
      sigma.current?.kill();
      sigma.current = null;
    },
    [],
  );

  // The selected node's neighbourhood highlighted: the node, its owner, its
  // children and its dependency edges' other ends keep their colours and
  // names; every other node is dimmed and unnamed and every edge not
  // touching the selection hidden, through reducers, which sigma applies at
  // render time without touching the graph.
  useEffect(() => {
    const s = sigma.current;
    if (!s) return;
    const g = s.getGraph();
    if (!selected || !g.hasNode(selected)) {
      s.setSetting("nodeReducer", null);
      s.setSetting("edgeReducer", null);
      return;
    }
    const hood = new Set([selected, ...g.neighbors(selected)]);
    s.setSetting("nodeReducer", (n, a) =>
      n === selected ? { ...a, highlighted: true, size: Math.max(a.size, 8), zIndex: 2 } : hood.has(n) ? { ...a, zIndex: 1 } : { ...a, color: dimmed, label: null, zIndex: 0 },
    );
    s.setSetting("edgeReducer", (e, a) => (g.extremities(e).includes(selected) ? { ...a, size: 2, color: a.dep ? depEdge : "#57606a" } : { ...a, hidden: true }));
  }, [selected, doc.data]);

  const kindCounts = useMemo(() => {
    const t = doc.data;
    const colors = t ? kindColors(t) : new Map<string, string>();
    const c = new Map<string, number>();
    for (const n of t?.nodes ?? []) c.set(n.kind, (c.get(n.kind) ?? 0) + 1);
    return [...colors].map(([kind, color]) => ({ kind, color, count: c.get(kind) ?? 0 }));
  }, [doc.data]);

  const counts = useMemo(() => {
    const c: Partial<Record<string, number>> = {};
    for (const n of doc.data?.nodes ?? []) c[n.phase] = (c[n.phase] ?? 0) + 1;
    return c;
  }, [doc.data]);

  const cam = () => sigma.current?.getCamera();
  const onKey = (e: KeyboardEvent<HTMLDivElement>) => {
    const c = cam();
    if (!c) return;
    const st = c.getState();
    const step = 0.1 * st.ratio;
    const moves: Record<string, () => void> = {
      ArrowLeft: () => c.animate({ x: st.x - step }, { duration: 100 }),
      ArrowRight: () => c.animate({ x: st.x + step }, { duration: 100 }),
      ArrowUp: () => c.animate({ y: st.y + step }, { duration: 100 }),
      ArrowDown: () => c.animate({ y: st.y - step }, { duration: 100 }),
      "+": () => c.animatedZoom({ duration: 150 }),
      "=": () => c.animatedZoom({ duration: 150 }),
      "-": () => c.animatedUnzoom({ duration: 150 }),
      "0": () => c.animatedReset({ duration: 150 }),
    };
    const m = moves[e.key];
    if (m) {
      e.preventDefault();
      m();
    }
  };
  const focus = (e: FormEvent) => {
    e.preventDefault();
    const s = sigma.current;
    if (!s) return;
    const g = s.getGraph();
    const hit = g.findNode((n) => n === find || n.endsWith(`/${find}`) || n.includes(find));
    if (!hit) return;
    setSelected(hit);
    const p = s.getNodeDisplayData(hit);
    if (p) s.getCamera().animate({ x: p.x, y: p.y, ratio: 0.05 }, { duration: 300 });
  };

  const sel = selected && sigma.current?.getGraph().hasNode(selected) ? sigma.current.getGraph().getNodeAttributes(selected) : null;
  const total = doc.data?.nodes.length ?? 0;
  return (
    <>
      <h1>
        Graph of{" "}
        <Link to={`/resources/${enc(kind)}/${enc(name)}`}>
          {kind}/{name}
        </Link>
      </h1>
      <ProblemView error={doc.error} />
      <ProblemView error={renderError} />
      {doc.loading && !doc.data && <Loading what="the graph" />}
      <div className="graph-bar">
        <ul className="legend" aria-label="Phases in this tree" data-testid="legend" data-total={total}>
          {phases.map((p) => (
            <li key={p} data-phase={p} data-count={counts[p] ?? 0}>
              <span className="swatch" style={{ background: colorBy === "phase" ? phaseColor[p] : "transparent", borderColor: phaseColor[p] }} aria-hidden="true" /> {p} {counts[p] ?? 0}
            </li>
          ))}
        </ul>
        <ul className="legend" aria-label="Kinds in this tree" data-testid="kind-legend">
          {kindCounts.map((k) => (
            <li key={k.kind} data-kind={k.kind} data-count={k.count} data-color={k.color}>
              <span className="swatch" style={{ background: colorBy === "kind" ? k.color : "transparent", borderColor: k.color }} aria-hidden="true" /> {k.kind} {k.count}
            </li>
          ))}
        </ul>
        <label>
          colour by{" "}
          <select value={colorBy} onChange={(e) => setColorBy(e.target.value as ColorBy)} name="color-by">
            <option value="phase">phase</option>
            <option value="kind">kind</option>
          </select>
        </label>
        <span className="muted">
          {total} nodes · {doc.data?.edges.length ?? 0} dependency edges
        </span>
        <label>
          <input type="checkbox" checked={showDeps} onChange={(e) => setShowDeps(e.target.checked)} /> dependency edges
        </label>
        <label>
          <input type="checkbox" checked={showOwners ?? total <= 2000} onChange={(e) => setShowOwners(e.target.checked)} /> owner edges
        </label>
        <form onSubmit={focus} role="search" aria-label="Find a node">
          <label>
            find <input value={find} onChange={(e) => setFind(e.target.value)} placeholder="name" />
          </label>
        </form>
      </div>
      <div className="graph-wrap">
        <div
          ref={box}
          className="graph-canvas"
          tabIndex={0}
          role="img"
          aria-label={`Graph of ${total} resources. Arrow keys pan, plus and minus zoom, 0 resets. Click a node for its details.`}
          onKeyDown={onKey}
          data-graph-ready={ready !== null ? "true" : undefined}
          data-ready-ms={ready ?? undefined}
          data-testid="graph"
        >
          <div ref={layer} className="graph-layer" />
        </div>
        {sel && (
          <aside className="card graph-panel" aria-label="Selected node">
            <h2>{sel.label as string}</h2>
            <p>
              <PhaseBadge phase={sel.phase as string} />
            </p>
            <Link to={`/resources/${(sel.label as string).split("/").map(enc).join("/")}`}>Open its detail</Link>{" "}
            <button type="button" className="link" onClick={() => navigate(`/graph/${(sel.label as string).split("/").map(enc).join("/")}`)}>
              Graph from here
            </button>
          </aside>
        )}
      </div>
      <p className="muted">
        Drag to pan, scroll to zoom; a name that would overlap another appears as you zoom in or hover. Click a node to light its neighbourhood. Owner edges are grey,
        dependency edges orange arrows.
      </p>
    </>
  );
}

// RootPicker offers the roots worth drawing: resources of kinds that
// compose children and that no composer owns.
function RootPicker() {
  const roots = useLive(
    async () => {
      const ms = await get<ManifestList>("/manifests");
      const composite = [...new Set((ms.items ?? []).filter((m) => (m.reactions ?? []).some((r) => (r.emits ?? []).includes("children"))).map((m) => m.kind))];
      const lists = await Promise.all(composite.map((k) => get<ResourceList>(`/resources?kind=${enc(k)}&limit=50&fields=-spec,-status`)));
      return lists.flatMap((l) => l.items ?? []).filter((r) => !r.owner_id);
    },
    [],
    ["kinds"],
  );
  const [kind, setKind] = useState("");
  const [name, setName] = useState("");
  return (
    <>
      <h1>Graph</h1>
      <form
        className="filters"
        onSubmit={(e) => {
          e.preventDefault();
          if (kind && name) navigate(`/graph/${enc(kind)}/${enc(name)}`);
        }}
      >
        <label>
          kind <input value={kind} onChange={(e) => setKind(e.target.value)} required />
        </label>
        <label>
          name <input value={name} onChange={(e) => setName(e.target.value)} required />
        </label>
        <button type="submit">Draw</button>
      </form>
      <ProblemView error={roots.error} />
      <h2>Composite roots</h2>
      {roots.loading && <Loading what="roots" />}
      <ul className="inline-list">
        {(roots.data ?? []).map((r) => (
          <li key={r.id}>
            <Link to={objectLink(`/graph/${enc(r.kind)}/${enc(r.name)}`, r.namespace)}>
              {r.kind}/{r.name}
            </Link>{" "}
            <PhaseBadge phase={r.phase} />
          </li>
        ))}
      </ul>
      {roots.data?.length === 0 && <p className="muted">No composite resource yet.</p>}
    </>
  );
}
