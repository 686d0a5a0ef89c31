"""The TPU client: flex-start queued resources and their nodes.

Flex-start fields (`provisioningModel`, `runDuration`, `queueingPolicy.validUntilDuration`) exist
only in the v2alpha1 REST API, which the typed `google-cloud-tpu` client cannot send
(reference/gcp-apis.md §0). So create is one JSON POST through google-auth's `AuthorizedSession`
(followed by a bounded wait on its v2alpha1 LRO), and everything else goes through
`google.cloud.tpu_v2.TpuClient(transport="rest")`. The v2 client drops alpha-only fields, so state
is always read from the queued resource itself, never from an LRO.

Every error leaves this module as an `infra.tpu_errors.TpuError`; transient ones are retried here
(a few tries, exponential backoff with jitter) before they do.

The Google clients block, so the event loop calls them through `TpuService.aio` (`AsyncTpuService`),
which runs each call in a worker thread.
"""

from __future__ import annotations

import asyncio
import enum
import random
import re
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, TypeVar

import google.auth
import requests
from google.api_core import exceptions as gexc
from google.api_core.future import polling
from google.auth import exceptions as auth_exc
from google.auth.credentials import Credentials
from google.auth.transport.requests import AuthorizedSession

from infra import boot_phases
from infra.boot_phases import BootReport
from infra.tpu_errors import TpuError, TpuErrorKind, classify_exception, classify_failed_qr, classify_status

if TYPE_CHECKING:
    from google.cloud import tpu_v2

__all__ = [
    "AsyncTpuService", "NodeView", "QrSpec", "QueuedResourceView", "RunWindow", "TpuConfig", "TpuError", "TpuErrorKind", "TpuService",
    "bot_labels", "classify_failed_qr", "flex_start_body", "label_value",
]

T = TypeVar("T")

DEFAULT_ENDPOINT = "https://tpu.googleapis.com"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
MANAGED_BY = "tpubot"

# Exceptions that mean "the call failed" (and get classified); anything else is a bug and propagates.
_CALL_ERRORS = (gexc.GoogleAPICallError, gexc.RetryError, requests.RequestException, auth_exc.GoogleAuthError,
                futures.TimeoutError, TimeoutError, ConnectionError)


@dataclass(frozen=True)
class TpuConfig:
    project: str
    accelerator_type: str = "v5litepod-1"
    runtime_version: str = "v2-alpha-tpuv5-lite"
    network: str = "default"
    subnetwork: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)  # extra labels on every QR
    max_run_duration: timedelta = timedelta(hours=4)
    valid_until_duration: timedelta = timedelta(hours=4)
    api_endpoint: str = ""  # "" -> the real https://tpu.googleapis.com ; "http://127.0.0.1:PORT" for the sandbox
    # Network tags on the node: the firewall rule that admits the bot to the model port targets them.
    network_tags: tuple[str, ...] = ("tpubot-model",)
    # False when the bot runs inside the VPC (ENDPOINT_ADDRESS=internal): the node needs no external IP.
    external_ips: bool = True
    timeout: float = 30.0  # explicit per-call timeout (seconds)
    # TPU_SERVICE_ACCOUNT: the account the node's VM runs as; "" leaves it to the project's default
    # Compute Engine account. Either way the VM's token carries the cloud-platform scope.
    service_account: str = ""


@dataclass(frozen=True)
class QrSpec:
    """What to create; ids are chosen by the caller (deterministic, so a retry adopts instead of duplicating)."""

    qr_id: str
    node_id: str
    zone: str
    labels: Mapping[str, str]
    startup_script: str
    max_run_duration: timedelta | None = None  # None -> TpuConfig.max_run_duration
    valid_until_duration: timedelta | None = None  # None -> TpuConfig.valid_until_duration


class QrState(enum.StrEnum):
    """The TPU API's QueuedResourceState names (a StrEnum: it compares equal to the name)."""

    STATE_UNSPECIFIED = "STATE_UNSPECIFIED"
    CREATING = "CREATING"
    ACCEPTED = "ACCEPTED"  # the older name of WAITING_FOR_RESOURCES
    WAITING_FOR_RESOURCES = "WAITING_FOR_RESOURCES"
    PROVISIONING = "PROVISIONING"
    ACTIVE = "ACTIVE"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    FAILED = "FAILED"
    DELETING = "DELETING"

    @classmethod
    def _missing_(cls, value: object) -> QrState:
        return cls.STATE_UNSPECIFIED  # a state newer than this client: nothing below branches on it

    @property
    def is_terminal(self) -> bool:
        """Runs no TPU and never will again, yet stays listed (and may hold quota) until deleted."""
        return self in (QrState.FAILED, QrState.SUSPENDING, QrState.SUSPENDED)


@dataclass(frozen=True)
class QueuedResourceView:
    qr_id: str
    name: str
    zone: str
    state: QrState
    state_initiator: str  # "USER" | "SERVICE" | "STATE_INITIATOR_UNSPECIFIED"
    failure_message: str | None
    failure_code: int | None  # google.rpc.Code of failedData.error
    labels: dict[str, str]
    node_id: str | None
    create_time: datetime | None
    valid_until_time: datetime | None


@dataclass(frozen=True)
class RunWindow:
    """A flex-start QR's `runDuration`: its length, and when the cloud deletes the VM (once ACTIVE)."""

    max_run_seconds: float | None
    termination_time: float | None  # epoch seconds


@dataclass(frozen=True)
class NodeView:
    node_id: str
    name: str
    state: str  # Node.State enum name, e.g. "READY"
    health: str  # Node.Health enum name, e.g. "HEALTHY"
    external_ip: str | None
    internal_ip: str | None
    labels: dict[str, str]


# --- labels ------------------------------------------------------------------------------------

_LABEL_INVALID = re.compile(r"[^a-z0-9_-]+")


def label_value(text: str) -> str:
    """A valid GCP label value: lowercase, [a-z0-9_-], at most 63 characters."""
    return _LABEL_INVALID.sub("-", str(text).lower())[:63]


def bot_labels(team: str, channel: str, lease_id: str, holder: str = "") -> dict[str, str]:
    """The labels that let the reconciler find and attribute every QR the bot created
    (and, with the holder, rebuild a lost lease with the same tear-down rights)."""
    labels = {
        "managed-by": MANAGED_BY,
        "tpubot-team": label_value(team),
        "tpubot-channel": label_value(channel),
        "tpubot-lease": label_value(lease_id),
    }
    if holder:
        labels["tpubot-holder"] = label_value(holder)
    return labels


# --- request body --------------------------------------------------------------------------------

def flex_start_body(config: TpuConfig, spec: QrSpec) -> dict[str, Any]:
    """The v2alpha1 QueuedResource JSON gcloud sends for `--provisioning-model=flex-start` (reference §1.5)."""
    parent = f"projects/{config.project}/locations/{spec.zone}"
    network_config: dict[str, Any] = {"network": config.network, "enableExternalIps": config.external_ips}
    if config.subnetwork:
        network_config["subnetwork"] = config.subnetwork
    return {
        "tpu": {"nodeSpec": [{
            "parent": parent,
            "nodeId": spec.node_id,
            "node": {
                "acceleratorType": config.accelerator_type,
                "runtimeVersion": config.runtime_version,
                "labels": {**config.labels, **spec.labels},
                # Guest attributes are off unless the instance's metadata turns them on (Compute's
                # "enable-guest-attributes"); the startup script publishes its boot phases there.
                "metadata": {"startup-script": spec.startup_script, "enable-guest-attributes": "TRUE"},
                "networkConfig": network_config,
                "serviceAccount": ({"email": config.service_account, "scope": [CLOUD_PLATFORM_SCOPE]}
                                   if config.service_account else {}),
                **({"tags": list(config.network_tags)} if config.network_tags else {}),
            },
        }]},
        "provisioningModel": "FLEX_START",
        "runDuration": {"maxRunDuration": _run_duration(spec, config)},
        "queueingPolicy": {"validUntilDuration": _duration(spec.valid_until_duration or config.valid_until_duration)},
    }


# --- the service ---------------------------------------------------------------------------------

class TpuService:
    """Queued resources and nodes of one project, through the real Google clients."""

    def __init__(
        self,
        config: TpuConfig,
        credentials: Credentials | None = None,
        *,
        max_attempts: int = 3,
        retry_base_delay: float = 0.5,
        lro_timeout: float = 120.0,
        lro_poll_interval: float = 1.0,
        on_error: Callable[[TpuError], None] | None = None,
    ) -> None:
        self.config = config
        self._on_error = on_error  # e.g. a metrics counter by error kind; called for every classified error
        self._max_attempts = max(1, max_attempts)
        self._retry_base_delay = retry_base_delay
        self._lro_timeout = lro_timeout
        self._lro_poll_interval = lro_poll_interval
        self._random = random.Random()
        if credentials is None:
            try:
                credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
            except auth_exc.GoogleAuthError as exc:
                raise classify_exception(exc) from exc
        endpoint = config.api_endpoint.rstrip("/")
        self._base_url = endpoint if "://" in endpoint else f"https://{endpoint}" if endpoint else DEFAULT_ENDPOINT
        self._session = AuthorizedSession(credentials)
        # Imported here: the web and most commands never call the TPU API, and this client's gRPC and
        # proto-plus stack was a tenth of a second of every start.
        from google.cloud import tpu_v2

        self._client = tpu_v2.TpuClient(
            transport="rest",
            credentials=credentials,
            client_options={"api_endpoint": endpoint} if endpoint else None,
        )
        self.aio = AsyncTpuService(self)

    def close(self) -> None:
        self._session.close()
        self._client.transport.close()

    def __enter__(self) -> "TpuService":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- queued resources ------------------------------------------------------------------------
    def create_queued_resource(self, spec: QrSpec) -> QueuedResourceView:
        """Create the flex-start QR (or adopt the existing one with the same id) and return its view.

        Waits (bounded by `lro_timeout`) for the create LRO so that a rejection such as FLEX_START
        not supported in this zone is raised here as a classified `TpuError`.
        """
        url = f"{self._base_url}/v2alpha1/{self._parent(spec.zone)}/queuedResources"
        body = flex_start_body(self.config, spec)

        def post() -> dict | None:
            response = self._session.post(url, params={"queuedResourceId": spec.qr_id}, json=body,
                                          timeout=self.config.timeout)
            # 409, already exists: adopt it (ids are deterministic, so it is ours).
            return None if response.status_code == 409 else _json(response)

        operation = self._with_retries(spec.zone, post)
        if operation is not None:
            self._wait_for_create(spec.zone, operation)
        view = self.get_queued_resource(spec.zone, spec.qr_id)
        if view is None:
            if operation is None:  # existed a moment ago, deleted since: a race with a teardown
                raise TpuError(TpuErrorKind.NOT_FOUND, f"queued resource {spec.qr_id} vanished while adopting it",
                               zone=spec.zone)
            return self._creating_view(spec)
        return view

    def get_queued_resource(self, zone: str, qr_id: str) -> QueuedResourceView | None:
        resource = self._call_unless_missing(zone, self._client.get_queued_resource,
                                             name=f"{self._parent(zone)}/queuedResources/{qr_id}")
        return None if resource is None else _queued_resource_view(resource)

    def get_run_window(self, zone: str, qr_id: str) -> RunWindow | None:
        """The flex-start run window (v2alpha1 only: the v2 client drops `runDuration`); None if the QR is gone."""
        url = f"{self._base_url}/v2alpha1/{self._parent(zone)}/queuedResources/{qr_id}"

        def fetch() -> dict | None:
            response = self._session.get(url, timeout=self.config.timeout)
            return None if response.status_code == 404 else _json(response)

        body = self._with_retries(zone, fetch)
        if body is None:
            return None
        run = body.get("runDuration") or {}
        max_run = run.get("maxRunDuration")
        termination = run.get("terminationTime")
        return RunWindow(
            max_run_seconds=float(str(max_run).rstrip("s")) if max_run else None,
            termination_time=datetime.fromisoformat(termination.replace("Z", "+00:00")).timestamp()
            if termination else None,
        )

    def list_queued_resources(self, zone: str, label_filter: Mapping[str, str] | None = None
                              ) -> list[QueuedResourceView]:
        """Every QR in the zone (all pages), keeping those whose labels include `label_filter`.

        The v2 list call has no server-side filter, so labels are matched here.
        """
        def fetch_all() -> list[QueuedResourceView]:
            pager = self._client.list_queued_resources(parent=self._parent(zone), retry=None,
                                                       timeout=self.config.timeout)
            return [_queued_resource_view(resource) for resource in pager]

        views = self._with_retries(zone, fetch_all)
        wanted = dict(label_filter or {})
        return [view for view in views if all(view.labels.get(key) == value for key, value in wanted.items())]

    def delete_queued_resource(self, zone: str, qr_id: str, *, wait: bool = True) -> None:
        """Force-delete the QR and its node. Already gone counts as success.

        With `wait`, blocks until the delete LRO is done or `lro_timeout` passes; after a timeout the
        deletion is still under way (the QR shows DELETING) and the call returns normally.
        """
        from google.cloud import tpu_v2

        request = tpu_v2.DeleteQueuedResourceRequest(name=f"{self._parent(zone)}/queuedResources/{qr_id}", force=True)
        operation = self._call_unless_missing(zone, self._client.delete_queued_resource, request=request)
        if operation is None or not wait:
            return
        poll = polling.DEFAULT_POLLING.with_delay(
            initial=self._lro_poll_interval, maximum=self._lro_poll_interval * 10, multiplier=1.5
        ).with_timeout(self._lro_timeout)

        def wait_done() -> None:
            try:
                operation.result(timeout=self._lro_timeout, polling=poll)
            except gexc.NotFound:
                pass  # deleted by someone else meanwhile
            except (futures.TimeoutError, gexc.RetryError):
                pass  # still deleting; documented: the caller sees DELETING on the next read

        self._with_retries(zone, wait_done)

    # --- nodes -----------------------------------------------------------------------------------------
    def get_node(self, zone: str, node_id: str) -> NodeView | None:
        node = self._call_unless_missing(zone, self._client.get_node, name=f"{self._parent(zone)}/nodes/{node_id}")
        return None if node is None else _node_view(node)

    def get_boot_report(self, zone: str, node_id: str) -> BootReport | None:
        """What the node's VM published about its boot (guest attributes in boot_phases.NAMESPACE);
        None if the node is gone. A node that published nothing yet gives an empty report."""
        from google.cloud import tpu_v2

        request = tpu_v2.GetGuestAttributesRequest(name=f"{self._parent(zone)}/nodes/{node_id}",
                                                   query_path=f"{boot_phases.NAMESPACE}/")
        response = self._call_unless_missing(zone, self._client.get_guest_attributes, request=request)
        if response is None:
            return None
        values = {item.key: item.value for worker in response.guest_attributes[:1]
                  for item in worker.query_value.items if item.namespace == boot_phases.NAMESPACE}
        return boot_phases.read_report(values)

    def list_accelerator_types(self, zone: str) -> list[str]:
        """The accelerator types the zone offers (e.g. `v5litepod-1`), all pages; the zone search's filter."""
        def fetch_all() -> list[str]:
            pager = self._client.list_accelerator_types(parent=self._parent(zone), retry=None,
                                                        timeout=self.config.timeout)
            return sorted({item.type_ or item.name.rsplit("/", 1)[-1] for item in pager})

        return self._with_retries(zone, fetch_all)

    # --- internals -------------------------------------------------------------------------------------
    def _parent(self, zone: str) -> str:
        return f"projects/{self.config.project}/locations/{zone}"

    def _call_unless_missing(self, zone: str, method: Callable[..., T], **request: Any) -> T | None:
        """A typed-client call with this service's retries and timeout; None when the API says NOT_FOUND."""
        def call() -> T | None:
            try:
                return method(**request, retry=None, timeout=self.config.timeout)
            except gexc.NotFound:
                return None

        return self._with_retries(zone, call)

    def _with_retries(self, zone: str | None, call: Callable[[], T]) -> T:
        """Run `call`; retry transient failures with exponential backoff and jitter; classify the rest."""
        for attempt in range(1, self._max_attempts + 1):
            try:
                return call()
            except _CALL_ERRORS as exc:
                error = classify_exception(exc, zone=zone)
                self._report(error)
                if not error.retryable or attempt == self._max_attempts:
                    raise error from exc
            # Full jitter around the exponential step keeps replicas from retrying in lockstep.
            delay = self._retry_base_delay * (2 ** (attempt - 1))
            time.sleep(delay * (0.5 + self._random.random()))
        raise AssertionError("unreachable")

    def _report(self, error: TpuError) -> None:
        if self._on_error is not None:
            self._on_error(error)

    def _wait_for_create(self, zone: str, operation: dict) -> None:
        """Poll the v2alpha1 LRO (raw JSON: the alpha response would break the v2 parser) until done."""
        deadline = time.monotonic() + self._lro_timeout
        delay = self._lro_poll_interval
        url = f"{self._base_url}/v2alpha1/{operation.get('name', '')}"
        while not operation.get("done"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not operation.get("name"):
                return  # accepted but still being validated; the QR's own state tells the rest
            time.sleep(min(delay, remaining))
            delay = min(delay * 1.5, self._lro_poll_interval * 10)
            operation = self._with_retries(zone, lambda: _json(self._session.get(url, timeout=self.config.timeout)))
        error = operation.get("error")
        if error:
            classified = classify_status(error.get("code"), error.get("message", ""), zone=zone)
            self._report(classified)
            raise classified

    def _creating_view(self, spec: QrSpec) -> QueuedResourceView:
        return QueuedResourceView(
            qr_id=spec.qr_id, name=f"{self._parent(spec.zone)}/queuedResources/{spec.qr_id}", zone=spec.zone,
            state=QrState.CREATING, state_initiator="USER", failure_message=None, failure_code=None,
            labels={**self.config.labels, **spec.labels}, node_id=spec.node_id, create_time=None,
            valid_until_time=None,
        )


class AsyncTpuService:
    """`TpuService` for the event loop: each call runs the blocking Google client once, in a worker thread."""

    def __init__(self, sync: TpuService) -> None:
        self.sync = sync

    async def create_queued_resource(self, spec: QrSpec) -> QueuedResourceView:
        return await asyncio.to_thread(self.sync.create_queued_resource, spec)

    async def get_queued_resource(self, zone: str, qr_id: str) -> QueuedResourceView | None:
        return await asyncio.to_thread(self.sync.get_queued_resource, zone, qr_id)

    async def get_run_window(self, zone: str, qr_id: str) -> RunWindow | None:
        return await asyncio.to_thread(self.sync.get_run_window, zone, qr_id)

    async def list_queued_resources(self, zone: str, label_filter: Mapping[str, str] | None = None
                                    ) -> list[QueuedResourceView]:
        return await asyncio.to_thread(self.sync.list_queued_resources, zone, label_filter)

    async def delete_queued_resource(self, zone: str, qr_id: str, *, wait: bool = True) -> None:
        await asyncio.to_thread(self.sync.delete_queued_resource, zone, qr_id, wait=wait)

    async def get_node(self, zone: str, node_id: str) -> NodeView | None:
        return await asyncio.to_thread(self.sync.get_node, zone, node_id)

    async def get_boot_report(self, zone: str, node_id: str) -> BootReport | None:
        return await asyncio.to_thread(self.sync.get_boot_report, zone, node_id)

    async def list_accelerator_types(self, zone: str) -> list[str]:
        return await asyncio.to_thread(self.sync.list_accelerator_types, zone)


# --- conversions -------------------------------------------------------------------------------------

def _json(response: requests.Response) -> dict:
    """A v2alpha1 answer's JSON; an HTTP error raised as google.api_core's exception for its status."""
    if response.status_code >= 400:
        raise gexc.from_http_response(response)
    return response.json()


def _queued_resource_view(resource: tpu_v2.QueuedResource) -> QueuedResourceView:
    state = resource.state
    failure = state.failed_data.error if "failed_data" in state else None
    node_spec = resource.tpu.node_spec[0] if resource.tpu.node_spec else None
    return QueuedResourceView(
        qr_id=resource.name.rsplit("/", 1)[-1],
        name=resource.name,
        zone=_zone_of(resource.name),
        state=QrState(_enum_name(state.state)),
        state_initiator=_enum_name(state.state_initiator),
        failure_message=(failure.message or None) if failure is not None else None,
        failure_code=failure.code if failure is not None else None,
        labels=dict(node_spec.node.labels) if node_spec is not None else {},
        node_id=(node_spec.node_id or None) if node_spec is not None else None,
        create_time=_datetime(resource.create_time),
        valid_until_time=_datetime(resource.queueing_policy.valid_until_time)
        if "valid_until_time" in resource.queueing_policy else None,
    )


def _node_view(node: tpu_v2.Node) -> NodeView:
    endpoint = node.network_endpoints[0] if node.network_endpoints else None
    return NodeView(
        node_id=node.name.rsplit("/", 1)[-1],
        name=node.name,
        state=_enum_name(node.state),
        health=_enum_name(node.health),
        external_ip=(endpoint.access_config.external_ip or None) if endpoint is not None else None,
        internal_ip=(endpoint.ip_address or None) if endpoint is not None else None,
        labels=dict(node.labels),
    )


def _zone_of(name: str) -> str:
    match = re.search(r"/locations/([^/]+)/", name)
    return match.group(1) if match else ""


def _enum_name(value: Any) -> str:
    # Unknown enum numbers come back as plain ints from proto-plus; keep them visible.
    return getattr(value, "name", str(value))


def _datetime(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value.timestamp(), timezone.utc)


def _run_duration(spec: QrSpec, config: TpuConfig) -> str:
    """The lease's own length (what its budget priced); the config's only when the spec names none.
    A zero or negative length is a bug upstream: refused here rather than sent (or defaulted)."""
    length = config.max_run_duration if spec.max_run_duration is None else spec.max_run_duration
    if length.total_seconds() < 1:
        raise ValueError(f"a queued resource's maxRunDuration must be at least 1s, not {length}")
    return _duration(length)


def _duration(delta: timedelta) -> str:
    return f"{int(delta.total_seconds())}s"
