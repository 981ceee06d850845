"""The wire types of docs/protocol.md §5 and §7, and their JSON forms."""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any, Union

MAX_KIND_VERSION = 32767

#: JSON is any value json.loads returns.
JSON = Union[dict[str, Any], list[Any], str, int, float, bool, None]


class MalformedEnvelope(ValueError):
    """MalformedEnvelope: a task envelope the SDK cannot use (answered 400)."""


@dataclass(frozen=True)
class KindVersion:
    """KindVersion is the one (kind, version) pair a provider serves; version is 1..32767."""

    kind: str
    version: int

    def __str__(self) -> str:
        return f"{self.kind}/v{self.version}"

    def validate(self) -> None:
        """Raise ValueError for an empty kind or a version outside 1..32767."""
        if not self.kind:
            raise ValueError("empty kind")
        if not 1 <= self.version <= MAX_KIND_VERSION:
            raise ValueError(f"kind {self.kind!r}: version {self.version} outside 1..{MAX_KIND_VERSION}")


@dataclass
class Resource:
    """Resource is a resource as the dispatcher sends it (the subject, or one of observed/descendants)."""

    id: str = ""
    kind: str = ""
    kind_version: int = 0
    name: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    spec: Any = None
    status: Any = None
    generation: int = 0
    phase: str = ""


@dataclass
class Operation:
    """Operation is an operate task's verb and its input."""

    verb: str = ""
    input: Any = None


@dataclass
class ProviderConfig:
    """ProviderConfig is the effective provider config handed to ``on_config``: spec and bundle."""

    spec: Any = None
    data: bytes = b""


@dataclass
class Request:
    """Request is one task as ``work`` receives it. Fields a reaction does not need are empty;
    every field has a default, so a unit test builds one with just what it needs.

    ``config`` and ``bundle`` are the EFFECTIVE provider config (kind default deep-merged with
    the resource's override, by the dispatcher) and its data bundle.
    """

    task_id: str = ""
    claim_epoch: int = 0
    attempt: int = 0
    reaction: str = ""
    kind: str = ""
    kind_version: int = 0
    trigger: str = ""
    task_type: str = ""
    resource: Resource = field(default_factory=Resource)
    status: Any = None
    observed: list[Resource] = field(default_factory=list)
    descendants: list[Resource] = field(default_factory=list)
    operation: Operation | None = None
    transition: str = ""
    generation: int = 0
    dedup_token: str = ""
    deadline: _dt.datetime | None = None
    config: Any = None
    bundle: bytes = b""


@dataclass
class Condition:
    """Condition is one status condition; status is "True", "False" or "Unknown"."""

    type: str
    status: str
    reason: str = ""
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "status": self.status}
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message
        return out


@dataclass
class Child:
    """Child is a composer's desired child; kind_version is required (1..32767)."""

    kind: str
    kind_version: int
    name: str
    labels: dict[str, str] | None = None
    spec: Any = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "kind_version": self.kind_version, "name": self.name}
        if self.labels:
            out["labels"] = self.labels
        if self.spec is not None:
            out["spec"] = self.spec
        return out


@dataclass
class Ref:
    """Ref names a resource by kind and name."""

    kind: str
    name: str


@dataclass
class ValueFlow:
    """ValueFlow copies source_field of the dependency's status to dependent_field of the dependent's spec."""

    dependent_field: str
    source_field: str


@dataclass
class Edge:
    """Edge: dependent waits for dependency to be synced, with values flowing from it."""

    dependent: Ref
    dependency: Ref
    values: list[ValueFlow] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "dependent": {"kind": self.dependent.kind, "name": self.dependent.name},
            "dependency": {"kind": self.dependency.kind, "name": self.dependency.name},
        }
        if self.values:
            out["values"] = [
                {"dependent_field": v.dependent_field, "source_field": v.source_field} for v in self.values
            ]
        return out


@dataclass
class Config:
    """Config is a provider config a composer owns; spec must be a JSON object (or None)."""

    name: str
    kind: str
    kind_version: int
    is_default: bool = False
    spec: Any = None
    data: bytes = b""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "kind_version": self.kind_version}
        if self.is_default:
            out["is_default"] = True
        if self.spec is not None:
            out["spec"] = self.spec
        if self.data:
            out["data"] = base64.b64encode(self.data).decode("ascii")
        return out


@dataclass
class Outcome:
    """Outcome is what a reaction produced; fill only what it emits (docs/protocol.md §7.2)."""

    status: Any = None
    conditions: list[Condition] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    configs: list[Config] = field(default_factory=list)
    operation_output: Any = None
    side_effect_done: bool = False

    def validate(self) -> None:
        """Raise ValueError naming what the core would reject, as the Go SDK's Outcome.Validate."""
        errs: list[str] = []
        for i, c in enumerate(self.children):
            where = f"children[{i}]"
            if not c.kind or not c.name:
                errs.append(f"{where}: kind and name are required")
            if not 1 <= c.kind_version <= MAX_KIND_VERSION:
                errs.append(f"{where}: kind_version {c.kind_version} outside 1..{MAX_KIND_VERSION}")
        for i, cf in enumerate(self.configs):
            where = f"configs[{i}]"
            if not cf.kind or not cf.name:
                errs.append(f"{where}: kind and name are required")
            if not 1 <= cf.kind_version <= MAX_KIND_VERSION:
                errs.append(f"{where}: kind_version {cf.kind_version} outside 1..{MAX_KIND_VERSION}")
            if cf.spec is not None and not isinstance(cf.spec, dict):
                errs.append(f"{where}.spec: is not a JSON object")
        for i, e in enumerate(self.edges):
            where = f"edges[{i}]"
            if not (e.dependent.kind and e.dependent.name and e.dependency.kind and e.dependency.name):
                errs.append(f"{where}: dependent and dependency need kind and name")
            for j, v in enumerate(e.values):
                if not v.dependent_field.startswith("/") or not v.source_field.startswith("/"):
                    errs.append(f'{where}.values[{j}]: fields must be JSON Pointers starting with "/"')
        if errs:
            raise ValueError("invalid outcome: " + "\n".join(errs))

    def to_json(self) -> dict[str, Any]:
        """Return the outcome's JSON object, empty parts left out."""
        out: dict[str, Any] = {}
        if self.status is not None:
            out["status"] = self.status
        if self.conditions:
            out["conditions"] = [c.to_json() for c in self.conditions]
        if self.children:
            out["children"] = [c.to_json() for c in self.children]
        if self.edges:
            out["edges"] = [e.to_json() for e in self.edges]
        if self.configs:
            out["configs"] = [c.to_json() for c in self.configs]
        if self.operation_output is not None:
            out["operation_output"] = self.operation_output
        if self.side_effect_done:
            out["side_effect_done"] = True
        return out


def merge_config(default: Any, override: Any) -> Any:
    """Deep-merge a provider config override onto a default, as the dispatcher does before
    it sends ``Request.config`` (webhooksdk.MergeConfig): objects merge recursively, any
    other value (arrays included) is replaced by the override's; a None override keeps the
    default, a None default yields the override. Raises ValueError if either is neither an
    object nor None. For a provider that layers defaults of its own under the config."""
    if override is None:
        return default
    if not isinstance(override, dict):
        raise ValueError("merge config: override is not a JSON object")
    if default is None:
        return override
    if not isinstance(default, dict):
        raise ValueError("merge config: default is not a JSON object")
    return _merge_objects(default, override)


def _merge_objects(default: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(default)
    for k, v in override.items():
        d = out.get(k)
        out[k] = _merge_objects(d, v) if isinstance(d, dict) and isinstance(v, dict) else v
    return out


def dumps(value: Any) -> bytes:
    """Encode value as compact UTF-8 JSON, as the Go SDK writes its answers."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def result_body(task_id: str, claim_epoch: int, outcome: Outcome | None = None,
                error: str | None = None, terminal: bool = False) -> bytes:
    """Return a Result's JSON body (docs/protocol.md §7.1): the outcome, or the error."""
    res: dict[str, Any] = {"task_id": task_id, "claim_epoch": claim_epoch}
    if error is not None:
        res["error"] = {"message": error, "terminal": terminal}
    else:
        res["outcome"] = (outcome or Outcome()).to_json()
    return dumps(res)


# Envelope decoding. The envelope is checked as strictly as Go's json.Unmarshal into the
# Envelope struct checks it: a field of the wrong JSON type makes the whole body malformed.

def _str(obj: dict[str, Any], key: str) -> str:
    v = obj.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise MalformedEnvelope(f"{key}: want a string")
    return v


def _int(obj: dict[str, Any], key: str) -> int:
    v = obj.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int):
        raise MalformedEnvelope(f"{key}: want an integer")
    return v


def _obj(v: Any, where: str) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise MalformedEnvelope(f"{where}: want an object")
    return v


def _resource(v: Any, where: str) -> Resource | None:
    obj = _obj(v, where)
    if obj is None:
        return None
    labels = obj.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(x, str) for x in labels.values()):
        raise MalformedEnvelope(f"{where}.labels: want an object of strings")
    return Resource(
        id=_str(obj, "id"), kind=_str(obj, "kind"), kind_version=_int(obj, "kind_version"),
        name=_str(obj, "name"), labels=labels, spec=obj.get("spec"), status=obj.get("status"),
        generation=_int(obj, "generation"), phase=_str(obj, "phase"),
    )


def _resources(v: Any, where: str) -> list[Resource]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise MalformedEnvelope(f"{where}: want an array")
    out = []
    for i, x in enumerate(v):
        r = _resource(x, f"{where}[{i}]")
        out.append(r if r is not None else Resource())
    return out


@dataclass
class Callback:
    """Callback is where an asynchronous Result goes (url), with its token and optional batch_url."""

    url: str
    token: str
    batch_url: str = ""


@dataclass
class Envelope:
    """Envelope is a decoded task envelope: the parts the SDK routes on, and its raw object."""

    task_id: str
    claim_epoch: int
    kind: str
    kind_version: int
    callback: Callback | None
    payload_url: str
    deadline: _dt.datetime | None
    raw: dict[str, Any]


def decode_envelope(obj: Any) -> Envelope:
    """Check a task envelope's field types and return it; MalformedEnvelope if one is wrong."""
    o = _obj(obj, "envelope")
    if o is None:
        raise MalformedEnvelope("envelope: want an object")
    for key in ("type", "task_type", "reaction", "trigger", "transition", "dedup_token"):
        _str(o, key)
    _int(o, "attempt")
    cb = None
    cbo = _obj(o.get("callback"), "callback")
    if cbo is not None:
        cb = Callback(url=_str(cbo, "url"), token=_str(cbo, "token"), batch_url=_str(cbo, "batch_url"))
    deadline = None
    dl = _str(o, "deadline")
    if dl:
        try:
            deadline = _dt.datetime.fromisoformat(dl.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise MalformedEnvelope(f"deadline: {dl!r} is not RFC 3339") from None
        if deadline.tzinfo is None:
            raise MalformedEnvelope(f"deadline: {dl!r} has no time zone")
    bundle = _str(o, "bundle")
    if bundle:
        try:
            base64.b64decode(bundle, validate=True)
        except (binascii.Error, ValueError):
            raise MalformedEnvelope("bundle: not standard base64") from None
    _resource(o.get("resource"), "resource")
    _resources(o.get("observed"), "observed")
    _resources(o.get("descendants"), "descendants")
    _obj(o.get("operation"), "operation")
    return Envelope(
        task_id=_str(o, "task_id"), claim_epoch=_int(o, "claim_epoch"), kind=_str(o, "kind"),
        kind_version=_int(o, "kind_version"), callback=cb, payload_url=_str(o, "payload_url"),
        deadline=deadline, raw=o,
    )


def new_request(env: Envelope) -> Request:
    """Build the Request ``work`` receives for a (complete) task envelope."""
    o = env.raw
    res = _resource(o.get("resource"), "resource") or Resource()
    op = None
    opo = _obj(o.get("operation"), "operation")
    if opo is not None:
        op = Operation(verb=_str(opo, "verb"), input=opo.get("input"))
    bundle = _str(o, "bundle")
    return Request(
        task_id=env.task_id, claim_epoch=env.claim_epoch, attempt=_int(o, "attempt"),
        reaction=_str(o, "reaction"), kind=env.kind, kind_version=env.kind_version,
        trigger=_str(o, "trigger"), task_type=_str(o, "task_type"), resource=res,
        status=o.get("status"), observed=_resources(o.get("observed"), "observed"),
        descendants=_resources(o.get("descendants"), "descendants"), operation=op,
        transition=_str(o, "transition"), generation=res.generation,
        dedup_token=_str(o, "dedup_token"), deadline=env.deadline, config=o.get("config"),
        bundle=base64.b64decode(bundle) if bundle else b"",
    )
