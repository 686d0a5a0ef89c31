"""A local emulator of the Cloud TPU REST API, for the real google clients only.

What it emulates is what `google.cloud.tpu_v2.TpuClient(transport="rest")` and a raw v2alpha1
`AuthorizedSession` see (reference/gcp-apis.md §2 and §9):

- `/v2/...` and `/v2alpha1/...` routes for queuedResources (create/get/list/delete), nodes
  (get/list, `:getGuestAttributes`) and operations (GET poll); `$alt=json;enum-encoding=int` is honoured, integer or
  name enums are accepted in bodies.
- `/v2/` responses are round-tripped through the v2 protos, so they carry only v2-known fields —
  the v2 LRO parser is strict and would choke on `provisioningModel`.
- Google's error JSON `{"error": {code, message, status, details}}`; pagination with
  `pageSize`/`pageToken`/`nextPageToken`.

The queued-resource state machine is computed lazily from the emulator's clock (no background
thread): CREATING → WAITING_FOR_RESOURCES → PROVISIONING → ACTIVE → SUSPENDED (service-initiated,
node deleted) once `maxRunDuration` has elapsed since ACTIVE, or earlier when `suspend()` plays a
preemption or maintenance event (`stateInitiator` SERVICE) or a user's action (USER); FAILED with `failedData.error`
when a zone has no capacity and `validUntilTime` passes. `fast_forward()` moves that clock.

Assumptions where the real behaviour is unverified (documented so they can be revisited):
- A missing VPC network is rejected synchronously with HTTP 400 and the compute-style text
  `Project "P" has no network named "x".`; a missing subnetwork (only checked when `subnetworks`
  is given) with 404 `The resource 'projects/P/regions/R/subnetworks/x' was not found`.
- A runtime version the emulator does not know → 400 `Cloud TPU received a bad request. The
  requested runtime version "x" is not supported for accelerator type "a" in zone "z".`
- A FLEX_START rejection leaves no queued resource behind (the create LRO fails with code 3).
- A non-forced delete of a QR with a running node → 400 FAILED_PRECONDITION.
- Server-side page size is capped at `max_page_size` (default 100); pageSize 0 means the cap.
- A create whose node names a service account (`serviceAccount.email`) is refused with 403 unless
  the caller may act as it (`iam.serviceAccounts.actAs`, held by `roles/iam.serviceAccountUser` on
  the account or the project), as Compute Engine refuses a VM attached to such an account, and with
  the IAM wording other services return for it (`Permission 'iam.serviceaccounts.actAs' denied on
  service account EMAIL (or it may not exist).`: Cloud Run, Cloud Functions, Terraform's googleapi
  errors quote it; no TPU-specific text was found). It is checked only when the TPU sandbox shares
  the project's `Iam`; the caller is the token's principal, and a request without one is the bot,
  as the project API decides (the sandbox's clients are anonymous). A create that leaves the
  account out runs as the default Compute Engine account and is not checked (the README asks for
  `roles/iam.serviceAccountUser` only with `TPU_SERVICE_ACCOUNT`).
- `getGuestAttributes`: `queryPath` "" or "/" is every namespace, "NS" or "NS/" one namespace,
  "NS/KEY" one key; nothing published there is an empty `items` list, not a 404. A node has one
  worker, "0"; `workerIds` naming no worker of the node gives an empty `guestAttributes` list.
"""

from __future__ import annotations

import base64
import enum
import itertools
import json
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

from google.cloud import tpu_v2
from google.protobuf import json_format

from infra.sandbox.http_server import LazyServed, handler_class, read_body, reply
from infra.sandbox.discovery import DiscoveryApi, RequestRejected, held_to_schema, load_api
from infra.sandbox.google_errors import STATUS, error_body, error_info, resource_info
from infra.sandbox.iam import Iam


class ZoneBehaviour(str, enum.Enum):
    ACCEPT = "accept"  # queues briefly, provisions, goes ACTIVE
    REJECT_FLEX_START = "reject_flex_start"  # create LRO fails with code 3 (FLEX_START not supported)
    NO_CAPACITY = "no_capacity"  # stays WAITING_FOR_RESOURCES, then FAILED (code 8) at validUntilTime
    QUOTA_EXCEEDED = "quota_exceeded"  # synchronous HTTP 429 on create


# A handful of v5e zones, loosely modelled on third-party flex-start scans: us-west4-a accepts
# flex-start v5litepod-1, europe-west4 rejects it.
DEFAULT_ZONES: dict[str, ZoneBehaviour] = {
    "us-west4-a": ZoneBehaviour.ACCEPT,
    "us-central1-a": ZoneBehaviour.ACCEPT,
    "us-south1-a": ZoneBehaviour.ACCEPT,
    "us-west1-c": ZoneBehaviour.NO_CAPACITY,
    "europe-west4-a": ZoneBehaviour.REJECT_FLEX_START,
    "europe-west4-b": ZoneBehaviour.REJECT_FLEX_START,
}

V5E_TYPES = tuple(f"v5litepod-{n}" for n in (1, 4, 8, 16, 32, 64, 128, 256))
V6E_TYPES = tuple(f"v6e-{n}" for n in (1, 4, 8, 16, 32, 64, 128, 256))
ACCELERATOR_TYPES = frozenset(V5E_TYPES + V6E_TYPES)
RUNTIME_VERSIONS = frozenset({"v2-alpha-tpuv5-lite", "v2-alpha-tpuv6e", "tpu-ubuntu2204-base"})

PROVISIONING_MODELS = ["PROVISIONING_MODEL_UNSPECIFIED", "STANDARD", "SPOT", "RESERVATION_BOUND", "FLEX_START"]

_ID_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_PATH_RE = re.compile(
    r"^/(?P<version>v2|v2alpha1)/projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)"
    r"/(?P<collection>queuedResources|nodes|operations|acceleratorTypes)(?:/(?P<id>[^/:]+))?(?::(?P<action>\w+))?$"
)


@dataclass(frozen=True)
class SandboxTimings:
    """Seconds each phase lasts before `time_scale` is applied."""

    creating: float = 0.2
    waiting: float = 1.0
    provisioning: float = 1.0
    deleting: float = 0.2

    def scaled(self, factor: float) -> "SandboxTimings":
        return SandboxTimings(*(value * factor for value in (self.creating, self.waiting, self.provisioning,
                                                                 self.deleting)))


class CreateAttempt(NamedTuple):
    zone: str
    # accepted | queued_without_capacity | already_exists | flex_start_rejected | quota_exceeded | bad_zone |
    # permission_denied | bad_accelerator | bad_runtime | network_not_found | bad_request
    outcome: str


class RecordedRequest(NamedTuple):
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


# What Google answers for each injected status. 504's text is gRPC's own for DEADLINE_EXCEEDED, which
# "may be returned even if the operation has completed successfully" (google.rpc.Code).
_INJECTED_MESSAGES = {
    503: "The service is currently unavailable.",
    429: "Quota exceeded for quota metric 'Create requests' and limit 'Create requests per minute' of service "
         "'tpu.googleapis.com'.",
    504: "Deadline expired before operation could complete.",
}


@dataclass(frozen=True)
class _InjectedFailure:
    http_status: int
    message: str
    path_contains: str | None
    method: str | None
    applied: bool  # the request is carried out, then this error answered instead of its result

    def matches(self, method: str, path: str) -> bool:
        return (self.path_contains is None or self.path_contains in path) and self.method in (None, method)

    def answer(self) -> tuple[int, dict]:
        return self.http_status, _ApiError(self.http_status, self.message).body()


class _ApiError(Exception):
    def __init__(self, http_status: int, message: str, details: list[dict] | None = None,
                 status: str | None = None, outcome: str = "bad_request") -> None:
        super().__init__(message)
        self.outcome = outcome  # what a failed create is recorded as in `create_attempts`
        self.http_status = http_status
        self.message = message
        self.details = details or []
        self.status = status or STATUS.get(http_status, "UNKNOWN")

    def body(self) -> dict:
        return error_body(self.http_status, self.message, self.status, self.details)


@dataclass
class _QueuedResource:
    """One stored QR; its state is a function of the clock, see `TpuSandbox._phase`."""

    qr_id: str
    zone: str
    node_id: str
    body: dict  # the create body as received (enums normalised to names)
    created_at: float
    provisioning_model: str
    max_run_seconds: float | None
    valid_until: float | None
    capacity_at: float | None  # when the zone had capacity for it; None = never (so far)
    node_number: int
    deleting_since: float | None = None
    delete_done_at: float | None = None
    external_ip: str | None = None
    hook_host: str | None = None  # where on_node_ready put the node's model (the sandbox's "VPC" address)
    node_ready: threading.Event = field(default_factory=threading.Event)
    hook_claimed: bool = False
    node_gone_reported: bool = False
    suspended: tuple[float, str] | None = None  # (when, stateInitiator) of a suspension before the run ended


@dataclass
class _Operation:
    name: str
    zone: str
    qr_id: str
    verb: str
    created_at: float
    done_at: float  # on the emulator clock; a create LRO ends when its QR leaves CREATING
    error: dict | None = None
    snapshot: dict | None = None  # last QR view, served if the QR is gone by the time of the poll


class _Phase(NamedTuple):
    state: str
    initiator: str
    failed: dict | None
    node_visible: bool


class TpuSandbox(LazyServed):
    """The emulator and its Python control surface for tests and the bot's in-process mode."""

    _what = "TPU sandbox"

    def __init__(
        self,
        zones: Mapping[str, ZoneBehaviour] | None = None,
        timings: SandboxTimings = SandboxTimings(),
        time_scale: float = 1.0,
        external_ip: str = "127.0.0.1",
        networks: Iterable[str] = ("default",),
        project: str = "tpubot-sandbox",
        *,
        subnetworks: Iterable[str] | None = None,
        accelerators: Mapping[str, Iterable[str]] | None = None,
        on_node_ready: Callable[[str, str, dict[str, str]], str | None] | None = None,
        on_node_gone: Callable[[str, str], None] | None = None,
        max_page_size: int = 100,
        iam: Iam | None = None,  # the project's IAM: who may act as the account a create names; None: unchecked
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.project = project
        self.iam = iam
        self.external_ip = external_ip
        self.timings = timings.scaled(time_scale)
        self.on_node_ready = on_node_ready
        self.on_node_gone = on_node_gone
        self.max_page_size = max_page_size
        self.create_attempts: list[CreateAttempt] = []
        # Every request, newest last; bounded so a long-running sandbox does not grow without limit.
        self.requests: deque[RecordedRequest] = deque(maxlen=10_000)
        self._zones = dict(DEFAULT_ZONES if zones is None else zones)
        self._networks = set(networks)
        # zone -> accelerator types it offers; a zone not listed offers every known type.
        self._accelerators = {zone: frozenset(types) for zone, types in (accelerators or {}).items()}
        self._subnetworks = None if subnetworks is None else set(subnetworks)
        self._lock = threading.RLock()
        self._qrs: dict[tuple[str, str], _QueuedResource] = {}
        self._operations: dict[str, _Operation] = {}
        self._clock_offset = 0.0
        self._node_numbers = itertools.count(2)
        self._injected: list[_InjectedFailure] = []
        self._address = (host, port)
        self._http = None
        # Google's discovery documents for both versions (None without google-api-python-client: lenient).
        self.apis: dict[str, DiscoveryApi | None] = {
            "v2": load_api("tpu.v2", "google.cloud.tpu.v2"),
            "v2alpha1": load_api("tpu.v2alpha1", "google.cloud.tpu.v2alpha1"),
        }
        # (zone, node id) -> {(namespace, key): value}: what each node's VM wrote to its metadata server.
        self._guest_attributes: dict[tuple[str, str], dict[tuple[str, str], str]] = {}
        self.rejected: list[RequestRejected] = []  # requests the schema check refused, newest last
        self.response_problems: list[str] = []  # emulator responses that broke the schema (bugs)

    @property
    def strict(self) -> bool:
        return all(api is not None for api in self.apis.values())

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return handler_class(self._serve_http, ("GET", "POST", "DELETE", "PATCH"))

    def _serve_http(self, http: BaseHTTPRequestHandler) -> None:
        raw = read_body(http)
        try:
            body = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError as exc:
            status, payload = 400, _ApiError(400, f"Invalid JSON payload received. {exc}").body()
        else:
            authorization = http.headers.get("Authorization") or ""
            status, payload = self.handle(http.command, http.path, body, authorization)
        reply(http, status, json.dumps(payload, indent=2).encode(), "application/json; charset=UTF-8")

    # --- control surface ---------------------------------------------------------------------
    def now(self) -> float:
        """The emulator's clock: wall time plus everything `fast_forward` added."""
        return time.time() + self._clock_offset

    def fast_forward(self, seconds: float) -> None:
        """Advance the emulator's clock (timers, run durations, valid-until) without sleeping."""
        with self._lock:
            self._clock_offset += seconds

    def suspend(self, zone: str, qr_id: str, initiator: str = "SERVICE") -> None:
        """Suspend an ACTIVE QR now, before its run duration ends: SERVICE plays a preemption or a
        maintenance event, USER someone in the project (the API's `stateInitiator`, v2alpha1)."""
        if initiator not in ("SERVICE", "USER"):
            raise ValueError(f"stateInitiator is SERVICE or USER, not {initiator!r}")
        with self._lock:
            qr = self._qrs[(zone, qr_id)]
            now = self.now()
            if self._phase(qr, now).state != "ACTIVE":
                raise ValueError(f"{qr_id} is {self._phase(qr, now).state}, not ACTIVE")
            qr.suspended = (now, initiator)

    def set_zone(self, zone: str, behaviour: ZoneBehaviour) -> None:
        """Change a zone's behaviour; ACCEPT also frees capacity for QRs already waiting there."""
        with self._lock:
            self._zones[zone] = behaviour
            if behaviour is ZoneBehaviour.ACCEPT:
                now = self.now()
                for qr in self._qrs.values():
                    if qr.zone == zone and qr.capacity_at is None and self._phase(qr, now).state != "FAILED":
                        qr.capacity_at = now

    def zones(self) -> dict[str, ZoneBehaviour]:
        with self._lock:
            return dict(self._zones)

    def inject_failures(self, count: int, http_status: int = 503, message: str | None = None,
                        path_contains: str | None = None, method: str | None = None, applied: bool = False) -> None:
        """Answer the next `count` matching requests with an error (transient-fault tests); `applied`:
        carry the request out first, as a DEADLINE_EXCEEDED may be returned for a change that was made."""
        text = message or _INJECTED_MESSAGES.get(http_status, "Internal error encountered.")
        with self._lock:
            self._injected.extend([_InjectedFailure(http_status, text, path_contains, method, applied)] * count)

    def queued_resources(self) -> list[dict]:
        """Snapshot of every stored QR, for assertions.

        Each entry: qr_id, zone, node_id, name, state (enum name), state_initiator, failed_error
        (the failedData.error dict or None), labels, resource (the v2alpha1 JSON the API serves)
        and request (the create body exactly as received, enums normalised to names).
        """
        with self._lock:
            now = self.now()
            self._purge(now)
            snapshot = []
            for qr in sorted(self._qrs.values(), key=lambda q: (q.zone, q.qr_id)):
                view = self._qr_json(qr, now)
                snapshot.append({
                    "qr_id": qr.qr_id, "zone": qr.zone, "node_id": qr.node_id, "name": view["name"],
                    "state": view["state"]["state"], "state_initiator": view["state"]["stateInitiator"],
                    "failed_error": (view["state"].get("failedData") or {}).get("error"),
                    "labels": _node_labels(qr.body), "resource": view, "request": json.loads(json.dumps(qr.body)),
                })
            return snapshot

    def node_metadata(self, zone: str, node_id: str) -> dict[str, str]:
        """The instance metadata a node was created with (what its VM reads, e.g. `startup-script`)."""
        return dict(self._created_node(zone, node_id).get("metadata") or {})

    def node_service_account(self, zone: str, node_id: str) -> str:
        """The email the create request named in `serviceAccount`; "" when it left it empty (the project's
        default Compute Engine account, which the caller knows)."""
        return str((self._created_node(zone, node_id).get("serviceAccount") or {}).get("email") or "")

    def _created_node(self, zone: str, node_id: str) -> Mapping:
        """The `node` of the create request that made this node ({} for a node never created)."""
        with self._lock:
            for qr in self._qrs.values():
                if qr.zone == zone and qr.node_id == node_id:
                    return _node_spec(qr.body).get("node") or {}
        return {}

    def set_guest_attributes(self, zone: str, node_id: str, namespace: str, values: Mapping[str, str]) -> None:
        """What a node's VM PUT to `instance/guest-attributes/NAMESPACE/KEY` (its metadata server calls this)."""
        with self._lock:
            stored = self._guest_attributes.setdefault((zone, node_id), {})
            stored.update({(namespace, key): str(value) for key, value in values.items()})

    # --- state machine -----------------------------------------------------------------------
    def _phase(self, qr: _QueuedResource, now: float) -> _Phase:
        t = self.timings
        if qr.deleting_since is not None:
            return _Phase("DELETING", "USER", None, False)
        queued_at = qr.created_at + t.creating
        if now < queued_at:
            return _Phase("CREATING", "USER", None, False)
        provisioning_at = self._provisioning_at(qr)
        if provisioning_at is None:
            if qr.valid_until is not None and now >= qr.valid_until:
                return _Phase("FAILED", "SERVICE", {"error": {"code": 8, "message": _no_capacity_text(qr.zone)}},
                              False)
            return _Phase("WAITING_FOR_RESOURCES", "USER", None, False)
        if now < provisioning_at:
            return _Phase("WAITING_FOR_RESOURCES", "USER", None, False)
        active_at = provisioning_at + t.provisioning
        if now < active_at:
            return _Phase("PROVISIONING", "USER", None, False)
        if qr.suspended is not None and now >= qr.suspended[0]:
            return _Phase("SUSPENDED", qr.suspended[1], None, False)
        if qr.max_run_seconds is not None and now >= active_at + qr.max_run_seconds:
            return _Phase("SUSPENDED", "SERVICE", None, False)
        return _Phase("ACTIVE", "USER", None, True)

    def _provisioning_at(self, qr: _QueuedResource) -> float | None:
        """When the QR starts (or will start) PROVISIONING on the emulator clock; None if never."""
        if qr.capacity_at is None:
            return None
        provisioning_at = max(qr.created_at + self.timings.creating, qr.capacity_at) + self.timings.waiting
        return None if qr.valid_until is not None and provisioning_at > qr.valid_until else provisioning_at

    def _active_at(self, qr: _QueuedResource) -> float | None:
        """When the QR became (or will become) ACTIVE on the emulator clock; None if never."""
        provisioning_at = self._provisioning_at(qr)
        return None if provisioning_at is None else provisioning_at + self.timings.provisioning

    def _purge(self, now: float) -> None:
        for key, qr in list(self._qrs.items()):
            if qr.delete_done_at is not None and now >= qr.delete_done_at:
                del self._qrs[key]
                self._guest_attributes.pop((qr.zone, qr.node_id), None)

    def _ensure_node_ready(self, qr: _QueuedResource) -> None:
        """Run `on_node_ready` once per node, outside the lock (it may start a server)."""
        with self._lock:
            claim = not qr.hook_claimed
            qr.hook_claimed = True
        if claim:
            host = None
            try:
                if self.on_node_ready is not None:
                    host = self.on_node_ready(qr.zone, qr.node_id, dict(_node_labels(qr.body)))
            finally:
                qr.external_ip = host or self.external_ip
                qr.hook_host = host
                qr.node_ready.set()
        qr.node_ready.wait(timeout=60)

    def _claim_node_gone(self, qr: _QueuedResource) -> bool:
        """True exactly once per node that `on_node_ready` saw, when that node is gone (under the lock)."""
        if qr.hook_claimed and not qr.node_gone_reported and self.on_node_gone is not None:
            qr.node_gone_reported = True
            return True
        return False

    # --- JSON views ----------------------------------------------------------------------------
    def _qr_json(self, qr: _QueuedResource, now: float) -> dict:
        """The v2alpha1 view (enum names); `/v2/` responses are derived from it via the v2 proto."""
        phase = self._phase(qr, now)
        spec = json.loads(json.dumps(qr.body.get("tpu", {})))
        state: dict[str, Any] = {"state": phase.state, "stateInitiator": phase.initiator}
        if phase.failed:
            state["failedData"] = phase.failed
        view: dict[str, Any] = {
            "name": self._qr_name(qr.zone, qr.qr_id),
            "createTime": _rfc3339(qr.created_at),
            "tpu": spec,
            "state": state,
        }
        if qr.valid_until is not None:
            view["queueingPolicy"] = {"validUntilTime": _rfc3339(qr.valid_until)}
        view["provisioningModel"] = qr.provisioning_model
        if qr.max_run_seconds is not None:
            view["runDuration"] = {"maxRunDuration": _duration(qr.max_run_seconds)}
            active_at = self._active_at(qr)
            if active_at is not None and now >= active_at and qr.deleting_since is None:
                # Output only: when the cloud deletes the VM (the flex-start deadline).
                view["runDuration"]["terminationTime"] = _rfc3339(active_at + qr.max_run_seconds)
        if "spot" in qr.body:
            view["spot"] = qr.body["spot"]
        return view

    def _node_json(self, qr: _QueuedResource) -> dict:
        node = json.loads(json.dumps(_node_spec(qr.body).get("node", {})))
        external = (node.get("networkConfig") or {}).get("enableExternalIps", True)
        # The sandbox's "VPC" is loopback: the internal address is where the node's model listens.
        endpoint: dict[str, Any] = {"ipAddress": qr.hook_host or f"10.128.0.{qr.node_number % 250 + 2}",
                                    "port": 8470}
        if external:
            endpoint["accessConfig"] = {"externalIp": qr.external_ip or self.external_ip}
        node.update({
            "name": f"projects/{self.project}/locations/{qr.zone}/nodes/{qr.node_id}",
            "state": "READY",
            "health": "HEALTHY",
            "networkEndpoints": [endpoint],
            "queuedResource": self._qr_name(qr.zone, qr.qr_id),
            "apiVersion": "V2",
            "id": str(1_000_000 + qr.node_number),
            "createTime": _rfc3339(qr.created_at),
        })
        node.setdefault("networkConfig", {"network": "default", "enableExternalIps": True})
        return node

    def _qr_name(self, zone: str, qr_id: str) -> str:
        return f"projects/{self.project}/locations/{zone}/queuedResources/{qr_id}"

    def _operation_json(self, op: _Operation, version: str, now: float) -> dict:
        done = op.done_at is not None and now >= op.done_at
        body: dict[str, Any] = {
            "name": op.name,
            "metadata": {
                "@type": f"type.googleapis.com/google.cloud.tpu.{version}.OperationMetadata",
                "createTime": _rfc3339(op.created_at),
                "target": self._qr_name(op.zone, op.qr_id),
                "verb": op.verb,
                "cancelRequested": False,
                "apiVersion": version,
            },
            "done": done,
        }
        if done:
            body["metadata"]["endTime"] = _rfc3339(op.done_at)
            if op.error is not None:
                body["error"] = op.error
            elif op.verb == "delete":
                body["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
            else:
                qr = self._qrs.get((op.zone, op.qr_id))
                view = self._qr_json(qr, now) if qr is not None else op.snapshot
                assert view is not None, "a create operation is settled (its QR's view kept) before it is done"
                if version == "v2":
                    view = _as_v2(view, tpu_v2.QueuedResource, integer_enums=False)
                body["response"] = {"@type": f"type.googleapis.com/google.cloud.tpu.{version}.QueuedResource",
                                    **view}
        return body

    # --- request handling ----------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, body: Any, authorization: str = "") -> tuple[int, dict]:
        """One HTTP request → (status, JSON body). Called by the HTTP handler."""
        url = urlsplit(raw_path)
        query = parse_qs(url.query, keep_blank_values=True)
        with self._lock:
            self.requests.append(RecordedRequest(method, url.path, query, body))
            injected = next((f for f in self._injected if f.matches(method, url.path)), None)
            if injected is not None:
                self._injected.remove(injected)
                if not injected.applied:
                    return injected.answer()

        def answer() -> tuple[int, dict]:
            try:
                return self._route(method, url.path, query, body, authorization)
            except _ApiError as error:
                return error.http_status, error.body()

        api = self.apis.get(url.path.lstrip("/").split("/", 1)[0])
        answered = held_to_schema(api, (method, url.path, query, body), answer, self.rejected,
                                  self.response_problems, "tpu")
        if injected is not None:  # applied: the change is made, its answer lost on the way back
            return injected.answer()
        return answered

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: Any,
               authorization: str = "") -> tuple[int, dict]:
        match = _PATH_RE.match(path)
        if not match:
            raise _ApiError(404, f"The requested URL {path} was not found on this server.")
        version, project, zone = match["version"], match["project"], match["zone"]
        collection, item, action = match["collection"], match["id"], match["action"]
        integer_enums = "enum-encoding=int" in ";".join(query.get("$alt", []))
        if project != self.project:
            verb = {"GET": "get" if item else "list", "POST": "create", "DELETE": "delete"}.get(method, "get")
            if method == "POST" and collection == "queuedResources":
                self._record(zone, "permission_denied")
            raise _ApiError(403, f"Permission 'tpu.{collection}.{verb}' denied on resource "
                                 f"'//tpu.googleapis.com/projects/{project}/locations/{zone}' (or it may not exist).",
                            [error_info("IAM_PERMISSION_DENIED", "tpu.googleapis.com",
                                        permission=f"tpu.{collection}.{verb}")])
        with self._lock:
            if zone not in self._zones:
                if method == "POST" and collection == "queuedResources":
                    self._record(zone, "bad_zone")
                raise _ApiError(400, f'Cloud TPU received a bad request. The requested zone "{zone}" is not '
                                     f"supported. [EID: {_eid()}]")
            now = self.now()
            self._purge(now)
        if collection == "queuedResources":
            if method == "POST" and item is None:
                return self._create(version, zone, query, body or {}, now, authorization)
            if method == "GET" and item is None:
                return self._list_qrs(version, zone, query, integer_enums)
            if method == "GET" and action is None:
                return 200, self._render_qr(version, self._get_qr(zone, item), integer_enums)
            if method == "DELETE" and action is None:
                return self._delete(version, zone, item, query)
        if collection == "acceleratorTypes" and method == "GET":
            return self._accelerator_types(version, project, zone, item, query)
        if collection == "nodes" and method == "POST" and item is not None and action == "getGuestAttributes":
            return 200, self._guest_attributes_json(zone, self._get_node(zone, item), body or {})
        if collection == "nodes" and method == "GET" and action is None:
            if item is None:
                return self._list_nodes(version, zone, query, integer_enums)
            return 200, self._render_node(version, self._get_node(zone, item), integer_enums)
        if collection == "operations" and method == "GET" and item is not None:
            with self._lock:
                op = self._operations.get(f"projects/{project}/locations/{zone}/operations/{item}")
                if op is None:
                    raise _not_found(f"projects/{project}/locations/{zone}/operations/{item}")
                self._settle_operation(op, self.now())
                return 200, self._operation_json(op, version, self.now())
        raise _ApiError(400, f"Method {method} is not supported on {path}.")

    def _record(self, zone: str, outcome: str) -> None:
        with self._lock:
            self.create_attempts.append(CreateAttempt(zone, outcome))

    def _create(self, version: str, zone: str, query: dict, body: dict, now: float,
                authorization: str = "") -> tuple[int, dict]:
        qr_id = (query.get("queuedResourceId") or [""])[0]
        try:
            body = _normalise_enums(body)
            if not _ID_RE.match(qr_id):
                raise _ApiError(400, f"Cloud TPU received a bad request. Invalid queued resource id \"{qr_id}\"; "
                                     f"it must match {_ID_RE.pattern}. [EID: {_eid()}]")
            spec = _node_spec(body)
            node = spec.get("node") or {}
            node_id = spec.get("nodeId", "")
            if not _ID_RE.match(node_id or ""):
                raise _ApiError(400, "Cloud TPU received a bad request. tpu.nodeSpec[0].nodeId must be set to a "
                                     f"valid id. [EID: {_eid()}]")
            with self._lock:
                existing = self._qrs.get((zone, qr_id))
                if existing is not None:
                    self._record(zone, "already_exists")
                    raise _ApiError(409, f"Resource '{self._qr_name(zone, qr_id)}' already exists.",
                                    [resource_info(self._qr_name(zone, qr_id),
                                                   resourceType="tpu.googleapis.com/QueuedResource")])
            self._validate_node(zone, node)
            self._check_act_as(node, authorization)
            behaviour = self.zones()[zone]
            model = body.get("provisioningModel", "PROVISIONING_MODEL_UNSPECIFIED")
            if behaviour is ZoneBehaviour.QUOTA_EXCEEDED:
                region = zone.rsplit("-", 1)[0]
                self._record(zone, "quota_exceeded")
                raise _ApiError(429, "Quota 'TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI' exhausted. "
                                     f"Limit 0 in region {region}.",
                                [error_info("QUOTA_EXCEEDED", "tpu.googleapis.com",
                                            quota_limit="TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI",
                                            region=region)])
        except _ApiError as error:
            if error.http_status not in (409, 429):  # those two recorded themselves above
                self._record(zone, error.outcome)
            raise
        policy = body.get("queueingPolicy") or {}
        valid_until = None
        if "validUntilDuration" in policy:
            valid_until = now + _parse_duration(policy["validUntilDuration"])
        elif "validUntilTime" in policy:
            valid_until = _parse_rfc3339(policy["validUntilTime"])
        run = body.get("runDuration") or {}
        max_run_seconds = _parse_duration(run["maxRunDuration"]) if "maxRunDuration" in run else None
        with self._lock:
            if (zone, qr_id) in self._qrs:  # a concurrent create with the same id won the race
                self._record(zone, "already_exists")
                raise _ApiError(409, f"Resource '{self._qr_name(zone, qr_id)}' already exists.")
            # The create LRO ends when validation is over, i.e. when the QR leaves CREATING.
            op = self._new_operation(zone, qr_id, "create", now, done_at=now + self.timings.creating)
            if behaviour is ZoneBehaviour.REJECT_FLEX_START and model == "FLEX_START":
                accel = node.get("acceleratorType", "")
                op.error = {"code": 3, "message": f'FLEX_START provisioning model is not supported for accelerator '
                                                  f'type "{accel}" in location "{zone}"', "details": []}
                self._record(zone, "flex_start_rejected")
                return 200, self._operation_json(op, version, now)
            no_capacity = behaviour is ZoneBehaviour.NO_CAPACITY
            self._qrs[(zone, qr_id)] = _QueuedResource(
                qr_id=qr_id, zone=zone, node_id=node_id, body=body, created_at=now, provisioning_model=model,
                max_run_seconds=max_run_seconds, valid_until=valid_until, capacity_at=None if no_capacity else now,
                node_number=next(self._node_numbers),
            )
            self._record(zone, "queued_without_capacity" if no_capacity else "accepted")
            return 200, self._operation_json(op, version, now)

    def offered_accelerators(self, zone: str) -> frozenset[str]:
        return self._accelerators.get(zone, ACCELERATOR_TYPES)

    def _accelerator_types(self, version: str, project: str, zone: str, item: str | None,
                           query: dict) -> tuple[int, dict]:
        def view(accel: str) -> dict:
            family, _, chips = accel.rpartition("-")
            kind = {"v5litepod": "V5LITE_POD", "v6e": "V6E"}.get(family, "TYPE_UNSPECIFIED")
            return {"name": f"projects/{project}/locations/{zone}/acceleratorTypes/{accel}", "type": accel,
                    "acceleratorConfigs": [{"type": kind, "topology": _topology(int(chips or 1))}]}

        offered = sorted(self.offered_accelerators(zone))
        if item is not None:
            if item not in offered:
                raise _not_found(f"projects/{project}/locations/{zone}/acceleratorTypes/{item}")
            return 200, view(item)
        return self._page("acceleratorTypes", offered, query, view)

    def _validate_node(self, zone: str, node: dict) -> None:
        _validate_labels(node.get("labels") or {})
        accel = str(node.get("acceleratorType", ""))
        if accel not in self.offered_accelerators(zone):
            raise _ApiError(400, "Cloud TPU received a bad request. The requested accelerator configuration for "
                                 f'accelerator type, "{accel}", could not be found in the zonal accelerator '
                                 f'configurations for "{zone}".; the accelerator {accel} was not found in zone '
                                 f"{zone} [EID: {_eid()}]", outcome="bad_accelerator")
        runtime = str(node.get("runtimeVersion", ""))
        if runtime not in RUNTIME_VERSIONS:
            raise _ApiError(400, f'Cloud TPU received a bad request. The requested runtime version "{runtime}" is '
                                 f'not supported for accelerator type "{accel}" in zone "{zone}". [EID: {_eid()}]',
                            outcome="bad_runtime")
        network_config = node.get("networkConfig") or {}
        network = str(network_config.get("network") or "default").rsplit("/", 1)[-1]
        if network not in self._networks:
            raise _ApiError(400, f'Project "{self.project}" has no network named "{network}".',
                            outcome="network_not_found")
        subnetwork = str(network_config.get("subnetwork") or "").rsplit("/", 1)[-1]
        if subnetwork and self._subnetworks is not None and subnetwork not in self._subnetworks:
            raise _ApiError(404, f"The resource 'projects/{self.project}/regions/{zone.rsplit('-', 1)[0]}"
                                 f"/subnetworks/{subnetwork}' was not found", outcome="network_not_found")

    def _check_act_as(self, node: Mapping, authorization: str) -> None:
        """A node that runs as a named account needs a creator who may act as it (see the module docstring)."""
        email = str((node.get("serviceAccount") or {}).get("email") or "")
        if self.iam is None or not email:
            return
        principal = self.iam.principal(authorization)
        if principal is None:
            raise _ApiError(401, "Request had invalid authentication credentials. Expected OAuth 2 access token, "
                                 "login cookie or other valid authentication credential.", outcome="permission_denied")
        if self.iam.account_exists(email) and self.iam.allows(principal, "iam.serviceAccounts.actAs",
                                                              self.iam.account_resource(email)):
            return
        raise _ApiError(403, f"Permission 'iam.serviceaccounts.actAs' denied on service account {email} (or it may "
                             "not exist).",
                        [error_info("IAM_PERMISSION_DENIED", "iam.googleapis.com", permission="iam.serviceAccounts.actAs")],
                        outcome="permission_denied")

    def _get_qr(self, zone: str, qr_id: str) -> _QueuedResource:
        with self._lock:
            qr = self._qrs.get((zone, qr_id))
            if qr is None:
                raise _not_found(self._qr_name(zone, qr_id))
            return qr

    def _render_qr(self, version: str, qr: _QueuedResource, integer_enums: bool) -> dict:
        with self._lock:
            now = self.now()
            gone = self._phase(qr, now).state in ("SUSPENDED", "FAILED", "DELETING") and self._claim_node_gone(qr)
            view = self._qr_json(qr, now)
        if gone and self.on_node_gone is not None:  # outside the lock: it may stop a server
            self.on_node_gone(qr.zone, qr.node_id)
        return _as_v2(view, tpu_v2.QueuedResource, integer_enums) if version == "v2" else view

    def _list_qrs(self, version: str, zone: str, query: dict, integer_enums: bool) -> tuple[int, dict]:
        with self._lock:
            items = sorted((qr for qr in self._qrs.values() if qr.zone == zone), key=lambda q: q.qr_id)
        return self._page("queuedResources", items, query, lambda qr: self._render_qr(version, qr, integer_enums))

    def _get_node(self, zone: str, node_id: str) -> _QueuedResource:
        with self._lock:
            now = self.now()
            for qr in self._qrs.values():
                if qr.zone == zone and qr.node_id == node_id and self._phase(qr, now).node_visible:
                    break
            else:
                raise _not_found(f"projects/{self.project}/locations/{zone}/nodes/{node_id}")
        return qr

    def _guest_attributes_json(self, zone: str, qr: _QueuedResource, body: dict) -> dict:
        query_path = str(body.get("queryPath") or "")
        workers = [str(worker) for worker in body.get("workerIds") or []]
        if workers and "0" not in workers:
            return {"guestAttributes": []}  # a v5e-1 node has one worker, "0"
        namespace, _, key = query_path.strip("/").partition("/") if query_path.strip("/") else ("", "", "")
        with self._lock:
            stored = dict(self._guest_attributes.get((zone, qr.node_id), {}))
        items = [{"namespace": ns, "key": k, "value": value} for (ns, k), value in sorted(stored.items())
                 if (not namespace or ns == namespace) and (not key or k == key)]
        return {"guestAttributes": [{"queryPath": query_path, "queryValue": {"items": items}}]}

    def _render_node(self, version: str, qr: _QueuedResource, integer_enums: bool) -> dict:
        self._ensure_node_ready(qr)  # a node is looked at: its VM boots (once)
        view = self._node_json(qr)
        return _as_v2(view, tpu_v2.Node, integer_enums) if version == "v2" else view

    def _list_nodes(self, version: str, zone: str, query: dict, integer_enums: bool) -> tuple[int, dict]:
        with self._lock:
            now = self.now()
            items = sorted((qr for qr in self._qrs.values() if qr.zone == zone and self._phase(qr, now).node_visible),
                           key=lambda q: q.node_id)
        return self._page("nodes", items, query, lambda qr: self._render_node(version, qr, integer_enums))

    def _page(self, kind: str, items: list, query: dict, view: Callable[[Any], dict]) -> tuple[int, dict]:
        """One page of a list answer: `kind` holds the views of the page's items."""
        size = int((query.get("pageSize") or ["0"])[0] or 0)
        size = self.max_page_size if size <= 0 else min(size, self.max_page_size)
        token = (query.get("pageToken") or [""])[0]
        try:
            start = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
        except ValueError:
            raise _ApiError(400, f"Invalid page token {token!r}.") from None
        end = start + size
        next_token = {"nextPageToken": base64.urlsafe_b64encode(str(end).encode()).decode()} if end < len(items) else {}
        return 200, {kind: [view(item) for item in items[start:end]], **next_token, "unreachable": []}

    def _delete(self, version: str, zone: str, qr_id: str, query: dict) -> tuple[int, dict]:
        force = (query.get("force") or ["false"])[0].lower() == "true"
        with self._lock:
            qr = self._get_qr(zone, qr_id)
            now = self.now()
            phase = self._phase(qr, now)
            if not force and phase.state in ("PROVISIONING", "ACTIVE", "SUSPENDING"):
                raise _ApiError(400, f"Cloud TPU received a bad request. Queued resource '{self._qr_name(zone, qr_id)}' "
                                     "has nodes that are not deleted; delete them first or set force=true. "
                                     f"[EID: {_eid()}]", status="FAILED_PRECONDITION")
            if qr.deleting_since is None:
                qr.deleting_since = now
                qr.delete_done_at = now + self.timings.deleting
            assert qr.delete_done_at is not None, "set with deleting_since"
            gone = self._claim_node_gone(qr)
            op = self._new_operation(zone, qr_id, "delete", now, done_at=qr.delete_done_at)
            payload = self._operation_json(op, version, now)
        if gone and self.on_node_gone is not None:
            self.on_node_gone(zone, qr.node_id)
        return 200, payload

    def _new_operation(self, zone: str, qr_id: str, verb: str, now: float, *, done_at: float) -> _Operation:
        op = _Operation(name=f"projects/{self.project}/locations/{zone}/operations/{_operation_id(now)}",
                        zone=zone, qr_id=qr_id, verb=verb, created_at=now, done_at=done_at)
        self._operations[op.name] = op
        return op

    def _settle_operation(self, op: _Operation, now: float) -> None:
        qr = self._qrs.get((op.zone, op.qr_id))
        if qr is not None and op.verb == "create":
            op.snapshot = self._qr_json(qr, now)


# --- helpers -------------------------------------------------------------------------------------

def _node_spec(body: Mapping) -> dict:
    specs = (body.get("tpu") or {}).get("nodeSpec") or [{}]
    return specs[0]


def _validate_labels(labels: Mapping[str, str]) -> None:
    """Google's label rules (cloud.google.com/compute/docs/labeling-resources#requirements), checked as
    the TPU API checks them: the first character it does not take, in the words it uses — gcloud printed
    `INVALID_ARGUMENT: resource labels are invalid: value "pt-r1.9-resnet50-mp-func-v3-32-1vm" contains
    invalid character '.' at index 5 for key "test-name"` (GoogleCloudPlatform/ml-testing-accelerators#461).
    The wording for a key, a length or a count is modelled on that one (not seen in the wild)."""
    def allowed(ch: str) -> bool:
        return ch in "_-" or ch.isdigit() or (ch.isalpha() and not ch.isupper())

    def refuse(what: str) -> _ApiError:
        return _ApiError(400, f"resource labels are invalid: {what}", outcome="bad_labels")

    if len(labels) > 64:
        raise refuse(f"{len(labels)} labels is more than the 64 a resource may have")
    for key, value in labels.items():
        for kind, text in (("key", key), ("value", str(value))):
            at = next((i for i, ch in enumerate(text) if not allowed(ch)), None)
            if at is not None:
                raise refuse(f'{kind} "{text}" contains invalid character {text[at]!r} at index {at} for key "{key}"')
            if len(text) > 63:
                raise refuse(f'{kind} "{text}" is longer than 63 characters for key "{key}"')
        if not key or not (key[0].isalpha() and not key[0].isupper()):
            raise refuse(f'key "{key}" must start with a lowercase letter')


def _node_labels(body: Mapping) -> dict[str, str]:
    return dict((_node_spec(body).get("node") or {}).get("labels") or {})


def _normalise_enums(body: dict) -> dict:
    """Accept integer enums (what the typed client sends) as well as names."""
    body = json.loads(json.dumps(body))
    model = body.get("provisioningModel")
    if isinstance(model, int):
        body["provisioningModel"] = PROVISIONING_MODELS[model] if 0 <= model < len(PROVISIONING_MODELS) else str(model)
    return body


def _as_v2(view: dict, message_type: Any, integer_enums: bool) -> dict:
    """Round-trip through the v2 proto: drops alpha-only fields the strict v2 parsers reject."""
    message = message_type.pb()()
    json_format.ParseDict(view, message, ignore_unknown_fields=True)
    return json_format.MessageToDict(message, use_integers_for_enums=integer_enums)


def _topology(chips: int) -> str:
    """`1x1`, `2x2`, `2x4`, … the 2D slice shape of a v5e/v6e accelerator type."""
    side = 1
    while side * side * 2 <= chips:
        side *= 2
    other = chips // side
    return f"{min(side, other)}x{max(side, other)}"


def _not_found(name: str) -> _ApiError:
    return _ApiError(404, f"Resource '{name}' was not found", [resource_info(name)])


def _no_capacity_text(zone: str) -> str:
    return (f'There is no more capacity in the zone "{zone}"; you can try in another zone where Cloud TPU Nodes are '
            f"offered (see https://cloud.google.com/tpu/docs/regions) [EID: {_eid()}]")


def _eid() -> str:
    return "0x" + secrets.token_hex(8)


def _operation_id(now: float) -> str:
    return f"operation-{int(now * 1000)}-{secrets.token_hex(6)}-{secrets.token_hex(4)}-{secrets.token_hex(4)}"


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_rfc3339(text: str) -> float:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def _duration(seconds: float) -> str:
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds:.3f}s"


def _parse_duration(text: Any) -> float:
    value = str(text).strip()
    if not value.endswith("s"):
        raise _ApiError(400, f"Invalid value at duration ({value!r}): expected seconds like \"14400s\".")
    try:
        return float(value[:-1])
    except ValueError:
        raise _ApiError(400, f"Invalid value at duration ({value!r}).") from None
