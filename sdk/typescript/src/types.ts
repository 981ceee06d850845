// The provider-facing types: what `work` receives and returns. Field names are
// camelCase; the SDK converts them to and from the snake_case wire format of
// docs/protocol.md (see wire.ts).

/** The largest kind version (the core's smallint ceiling). */
export const MAX_KIND_VERSION = 32767;

/** A task's type. Informational: route on {@link Request.reaction}. */
export type TaskType = "reconcile" | "delete" | "operate" | "react";

/** Why a reaction fired. */
export type Trigger = "specChange" | "childrenSettled" | "deleteRequested" | "operation" | "reactor" | "resync";

/** The lifecycle edge a reactor binding fired on. */
export type Transition = "created" | "synced" | "degraded" | "failed" | "deleted";

/** A resource as the dispatcher sends it: a task's subject, or an entry of observed or descendants. */
export interface Resource<Spec = unknown, Status = unknown> {
  id: string;
  kind: string;
  kindVersion: number;
  /** Unique per kind. */
  name: string;
  labels: Record<string, string>;
  /** The desired state, validated against the kind's spec schema, value flows substituted. */
  spec: Spec;
  /** The last applied status; undefined if none yet. */
  status?: Status;
  /** Bumps on every spec change. */
  generation: number;
  /** Ready, Reconciling, Degraded, Failed, Orphaned, Quarantined or Deleting. */
  phase: string;
}

/** The verb and input of an operate task. */
export interface Operation<Input = unknown> {
  verb: string;
  input?: Input;
}

/**
 * One task as `work` receives it. Fields a reaction does not need are undefined (lists
 * are empty). Spec, Status, Config and Input type the documents (`conctl gen-types`
 * writes them from a kind's manifest).
 */
export interface Request<Spec = unknown, Status = unknown, Config = unknown, Input = unknown> {
  /** Identifies the task; stable across claims. */
  taskId: string;
  /** Identifies this claim of the task. */
  claimEpoch: number;
  /** Counts deliveries of the task, from 1. */
  attempt: number;
  /** The manifest reaction to run: a kind with several reactions switches on it. */
  reaction: string;
  /** The resource's kind version (always the provider's own). */
  kindVersion: number;
  trigger: Trigger;
  taskType: TaskType;
  /** The subject resource with its current spec and status. */
  resource: Resource<Spec, Status>;
  /** Status accumulated so far in this generation (undefined for the first handler). */
  status?: Status;
  /** A composer's current children. */
  observed: Resource[];
  /** A rollup's settled subtree. */
  descendants: Resource[];
  /** An operate task's verb and input. */
  operation?: Operation<Input>;
  /** The lifecycle edge of a reactor task. */
  transition?: Transition;
  /** The generation that fired: pin reads and idempotency keys to it. */
  generation: number;
  /** A stable id for non-idempotent sinks (reactor tasks). */
  dedupToken?: string;
  /** When the Result stops being accepted (the work signal aborts then too). */
  deadline?: Date;
  /** The EFFECTIVE provider config spec: the kind default deep-merged with the resource's override. */
  config?: Config;
  /** The EFFECTIVE provider config data (the override's if present, else the default's). */
  bundle?: Uint8Array;
}

/** One status condition, Kubernetes style. */
export interface Condition {
  type: string;
  /** "True", "False" or "Unknown". */
  status: string;
  reason?: string;
  message?: string;
}

/** A desired child of a composer. kindVersion is required (1..32767). */
export interface Child {
  kind: string;
  kindVersion: number;
  name: string;
  labels?: Record<string, string>;
  spec?: unknown;
}

/** Names a resource by kind and name. */
export interface Ref {
  kind: string;
  name: string;
}

/** Copies sourceField (a JSON Pointer into the dependency's status) to dependentField (into the dependent's spec). */
export interface ValueFlow {
  dependentField: string;
  sourceField: string;
}

/** Dependent waits for dependency to be synced, and copies values from it. */
export interface Edge {
  dependent: Ref;
  dependency: Ref;
  values?: ValueFlow[];
}

/** A provider config a composer owns. */
export interface Config {
  name: string;
  kind: string;
  kindVersion: number;
  /** Makes it the default config of its (kind, kindVersion). */
  isDefault?: boolean;
  /** A JSON object (absent means {}). */
  spec?: unknown;
  /** An opaque bundle. */
  data?: Uint8Array;
}

/** What a reaction produced. Fill only the parts the reaction emits. */
export interface Outcome<Status = unknown> {
  /** The resource status (last writer wins). */
  status?: Status;
  /** Health and custom axes (they accumulate). */
  conditions?: Condition[];
  /** A composer's desired children. */
  children?: Child[];
  /** A composer's dependency edges with their value flows. */
  edges?: Edge[];
  /** Provider configs a composer owns. */
  configs?: Config[];
  /** An operate reaction's output. */
  operationOutput?: unknown;
  /** A reactor's (informational) report that its side effect happened. */
  sideEffectDone?: boolean;
}

/** A provider config document: the JSON spec and the opaque bundle. */
export interface ProviderConfig<Config = unknown> {
  spec?: Config;
  data?: Uint8Array;
}

/**
 * The handler code for one (kind, version). `work` runs one task; `onConfig` and `ready`
 * are optional.
 */
export interface Provider<Spec = unknown, Status = unknown, Config = unknown, Input = unknown> {
  /** The kind served. */
  readonly kind: string;
  /** The kind version served, 1..32767. */
  readonly version: number;
  /**
   * Runs one task and returns the Outcome the reaction produced. A thrown error fails
   * the task: it is retried with backoff unless it is a {@link TerminalError}. Work must
   * honour signal (the task deadline, supersession by a newer claim, shutdown: its
   * reason says which) and be idempotent: delivery is at least once.
   */
  work(req: Request<Spec, Status, Config, Input>, signal: AbortSignal): Outcome<Status> | Promise<Outcome<Status>>;
  /**
   * Called before work whenever a task's effective config differs from the last one
   * this provider saw, the first included; calls are serialised, and a task's work
   * starts only after the onConfig for its config has returned. Without it, config
   * changes are ignored (the config also rides on every Request).
   */
  onConfig?(cfg: ProviderConfig<Config>): void | Promise<void>;
  /**
   * Reports whether the provider can work right now: health probes report it, and a
   * task arriving while it is false is refused with a transient 503. Must be cheap.
   * Without it the provider is always ready.
   */
  ready?(): boolean;
}

/** Returns the Provider of (kind, version) whose work is work. */
export function provider<Spec = unknown, Status = unknown, Config = unknown, Input = unknown>(
  kind: string,
  version: number,
  work: Provider<Spec, Status, Config, Input>["work"],
): Provider<Spec, Status, Config, Input> {
  return { kind, version, work };
}
