// The API's documents the console reads (docs/api.md). Their types are
// generated from the API's OpenAPI document into api-types.ts (ui/README.md
// says how, and how CI checks that they are current); this file names the
// ones the pages use. What the document leaves open, the console types here
// by hand: the phases (a string there), a kind's JSON Schemas and an
// endpoint's live view (any JSON there).
import type { components } from "./api-types";

type Schemas = components["schemas"];

export type Phase = "Deleting" | "Quarantined" | "Failed" | "Orphaned" | "Degraded" | "Ready" | "Reconciling";
export const phases: Phase[] = ["Ready", "Reconciling", "Degraded", "Failed", "Orphaned", "Quarantined", "Deleting"];

export type ProblemError = Schemas["ProblemError"];
export type Problem = Schemas["Problem"];

export type ResourceView = Schemas["ResourceView"];
export type ResourceList = Schemas["ResourceList"];
export type ChildList = Schemas["ChildList"];
export type DepEdge = Schemas["DepEdge"];
export type Dependencies = Schemas["Dependencies"];
export type OperationList = Schemas["OperationList"];
export type EventList = Schemas["EventList"];
export type RecoverResult = Schemas["RecoverResult"];
export type Topology = Schemas["Topology"];
export type TopologyNode = Schemas["TopologyNode"];

export type KindList = Schemas["KindList"];
export type KindConfig = Schemas["KindConfig"];
export type ManifestList = Omit<Schemas["ManifestList"], "items"> & { items: Manifest[] | null };

// A kind manifest, whose schemas the server accepted as JSON Schemas.
export type Manifest = Omit<Schemas["KindManifest"], "spec_schema" | "status_schema" | "config_schema"> & {
  spec_schema?: JSONSchema;
  status_schema?: JSONSchema;
  config_schema?: JSONSchema;
};

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

export type ProviderConfig = Schemas["ProviderConfig"];
export type ProviderConfigList = Schemas["ProviderConfigList"];
export type Binding = Schemas["ReactorBinding"];
export type BindingList = Schemas["ReactorBindingList"];
export type MemberList = Schemas["ClusterList"];

export type NamespaceList = Schemas["NamespaceList"];

export type DeliveryList = Schemas["DeliveryList"];
export type Delivery = Schemas["Delivery"];
export type ReplayAccepted = Schemas["ReplayAccepted"];
export type EndpointTest = Schemas["EndpointTest"];
export type RotatedSecret = Schemas["RotatedSecret"];
export type Endpoint = Omit<Schemas["EndpointView"], "live"> & { live?: EndpointLive };
export type EndpointList = Omit<Schemas["EndpointList"], "items"> & { items: Endpoint[] | null };

// EndpointLive is the serving pod's dispatcher's view of an endpoint
// (dispatch/registry's EndpointStatus), present where a dispatcher runs.
interface EndpointLive {
  in_flight: number;
  limit: number;
  breaker_state: string;
  breaker_until?: string;
  backoff_until?: string;
  backoff_reason?: string;
  last_probe?: string;
  probe_error?: string;
  unusable?: string;
  rate_limit?: number;
  effective_rate?: number;
  rate_tokens?: number;
  rate_waited?: number;
  rate_leases?: number;
  kinds: { kind: string; kind_version: number; ready: boolean; reason?: string }[];
}

export type AuditList = Schemas["AuditList"];
export type AuditEntry = Schemas["AuditEntry"];
