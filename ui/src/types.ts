// The API's documents the console reads (docs/api.md).

export type Phase = "Deleting" | "Quarantined" | "Failed" | "Orphaned" | "Degraded" | "Ready" | "Reconciling";
export const phases: Phase[] = ["Ready", "Reconciling", "Degraded", "Failed", "Orphaned", "Quarantined", "Deleting"];

export interface Resource {
  id: string;
  resource_version: number;
  kind: string;
  kind_version: number;
  name: string;
  labels: Record<string, string>;
  spec: unknown;
  status?: unknown;
  owner_id?: string;
  provider_config_ref?: string;
  generation: number;
  synced_gen: number;
  health_ok: boolean;
  failure_gen: number;
  phase: Phase;
  last_error?: string;
  created_at: string;
  updated_at: string;
}

export interface Condition {
  type: string;
  status: string;
  reason: string;
  message: string;
  last_transition_time?: string;
}

export interface Task {
  task_id: string;
  task_type: string;
  state: string;
  trigger: string;
  reaction?: string;
  generation: number;
  attempts: number;
  claim_epoch: number;
  claimed_by?: string;
  claimed_at?: string;
  lease_until?: string;
  deadline?: string;
  not_before: string;
  last_error?: string;
}

export interface Delivery {
  id: number;
  endpoint: string;
  at: string;
  resource: { id?: string; kind?: string; name?: string };
  task_id: string;
  task_type?: string;
  action?: string;
  claim_epoch: number;
  attempt: number;
  http_status: number;
  latency_ms: number;
  classification: string;
  failed: boolean;
  excerpt?: string;
}

export interface ResourceView extends Resource {
  conditions: Condition[];
  task?: Task;
  parked?: string;
  teardown?: { requested_at: string; finalizers: string[]; remaining: number; reason: string; blocked_by?: { kind: string; name: string; error: string; terminal: boolean } };
  recent_failed_deliveries?: Delivery[];
  pending_reactions?: { binding: string; transition: string; generation: number; attempts: number; last_error?: string; claimed: boolean; not_before: string }[];
  last_task?: { task_id: string; claim_epoch: number; claimed_at: string };
}

export interface Ref {
  kind: string;
  name: string;
}

export interface DepEdge {
  dependent: Ref;
  dependent_phase: string;
  dependency: Ref;
  dependency_phase: string;
  values?: { dependent_field: string; source_field: string }[];
}

export interface Reaction {
  name: string;
  trigger: string;
  emits?: string[];
  verb?: string;
  input_schema?: unknown;
}

export interface Manifest {
  kind: string;
  kind_version: number;
  description?: string;
  spec_schema?: JSONSchema;
  status_schema?: JSONSchema;
  config_schema?: JSONSchema;
  reactions?: Reaction[];
  finalizer_name?: string;
  [k: string]: unknown;
}

export interface JSONSchema {
  type?: string | string[];
  properties?: Record<string, JSONSchema>;
  required?: string[];
  items?: JSONSchema;
  description?: string;
  enum?: unknown[];
  default?: unknown;
  [k: string]: unknown;
}

export interface KindConfig {
  resource_version: number;
  max_inflight: number;
  task_deadline_secs: number;
  resync_interval_secs: number;
  resync_recomposes: boolean;
  orphan_grace_secs: number;
  max_transient_attempts: number;
}

export interface ProviderConfig {
  name: string;
  resource_version: number;
  kind: string;
  kind_version: number;
  is_default: boolean;
  spec: unknown;
  data?: string;
  created_at?: string;
  updated_at?: string;
}

export interface Binding {
  name: string;
  resource_version: number;
  watch_kind: string;
  watch_kind_version?: number;
  transition: string;
  reactor: string;
  reactor_version?: number;
  label_match?: Record<string, string>;
  enabled: boolean;
}

export interface EndpointLive {
  in_flight: number;
  limit: number;
  breaker_state: string;
  breaker_until?: string;
  backoff_until?: string;
  backoff_reason?: string;
  last_probe?: string;
  probe_error?: string;
  unusable?: string;
  kinds: { kind: string; kind_version: number; ready: boolean; reason?: string }[];
}

export interface Endpoint {
  name: string;
  resource_version: number;
  kinds: { kind: string; kind_version: number }[];
  target: { type: string; url?: string; function?: string; region?: string; invocation?: string };
  health: { type?: string; url?: string; interval_secs?: number };
  max_concurrency: number;
  request_timeout_secs: number;
  enabled: boolean;
  disabled_reason?: string;
  secret_rotation_ends_at?: string;
  live?: EndpointLive;
}

export interface Member {
  member_id: string;
  role: string;
  host: string;
  pid: number;
  version: string;
  shard_lo?: number;
  shard_hi?: number;
  in_flight: number;
  started_at: string;
  last_heartbeat: string;
  ready: boolean;
}

export interface Items<T> {
  items: T[];
  next_cursor?: string;
}
