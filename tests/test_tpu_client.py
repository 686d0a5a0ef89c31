"""TpuService against the TPU REST emulator: real google clients over real HTTP, no mocks.

Everything the bot relies on is exercised end to end: the flex-start create body, the QR state
walk, node IPs, 409 adoption, forced deletes, label-filtered pagination, service-initiated
suspension, the classified error for every way the emulator can refuse, and transient retries.
The emulator's clock is moved with `fast_forward` wherever a test would otherwise wait.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import TypeVar

import pytest
import waiting
from google.auth.credentials import AnonymousCredentials

from infra.sandbox.tpu_api import SandboxTimings, TpuSandbox, ZoneBehaviour
from infra.tpu import QrSpec, TpuConfig, TpuService, bot_labels, classify_failed_qr
from infra.tpu_errors import ErrorScope, TpuError, TpuErrorKind

T = TypeVar("T")
PROJECT = "tpubot-sandbox"
ZONE = "us-west4-a"
SCRIPT = "#!/bin/bash\necho '{\"image\":4}' > /tmp/limits\n"


wait_until = functools.partial(waiting.wait_until, timeout=10.0, interval=0.02)


def make_service(sandbox: TpuSandbox, **config: object) -> TpuService:
    return TpuService(
        TpuConfig(project=PROJECT, api_endpoint=sandbox.base_url, timeout=5.0, **config),  # type: ignore[arg-type]
        AnonymousCredentials(),
        retry_base_delay=0.01,
        lro_timeout=10.0,
        lro_poll_interval=0.02,
    )


@pytest.fixture
def sandbox() -> Iterator[TpuSandbox]:
    # Short real-time phases for the walk; long phases are skipped with fast_forward.
    with TpuSandbox(timings=SandboxTimings(creating=0.05, waiting=0.2, provisioning=0.2, deleting=0.05)) as box:
        yield box


@pytest.fixture
def tpu(sandbox: TpuSandbox) -> Iterator[TpuService]:
    service = make_service(sandbox)
    yield service
    service.close()


def spec(qr_id: str = "qr-a", zone: str = ZONE, lease: str = "lease-a", **extra: object) -> QrSpec:
    return QrSpec(qr_id=qr_id, node_id=f"node-{qr_id}", zone=zone, labels=bot_labels("T01TEAM", "C01CHAN", lease),
                  startup_script=SCRIPT, **extra)  # type: ignore[arg-type]


def state_of(tpu: TpuService, qr_id: str, zone: str = ZONE) -> str | None:
    view = tpu.get_queued_resource(zone, qr_id)
    return view.state if view else None


# --- create ---------------------------------------------------------------------------------------

def test_create_sends_the_flex_start_request(sandbox: TpuSandbox) -> None:
    with make_service(sandbox, labels={"cost-center": "ml"}, subnetwork="tpu-subnet") as tpu:
        view = tpu.create_queued_resource(spec(max_run_duration=timedelta(hours=2)))

    [stored] = sandbox.queued_resources()
    body = stored["request"]
    assert body["provisioningModel"] == "FLEX_START"
    assert body["runDuration"] == {"maxRunDuration": "7200s"}
    assert body["queueingPolicy"] == {"validUntilDuration": "14400s"}  # config default (4h)
    [node_spec] = body["tpu"]["nodeSpec"]
    assert node_spec["parent"] == f"projects/{PROJECT}/locations/{ZONE}"
    assert node_spec["nodeId"] == "node-qr-a"
    node = node_spec["node"]
    assert node["acceleratorType"] == "v5litepod-1"
    assert node["runtimeVersion"] == "v2-alpha-tpuv5-lite"
    assert node["metadata"] == {"startup-script": SCRIPT, "enable-guest-attributes": "TRUE"}
    assert node["networkConfig"] == {"network": "default", "subnetwork": "tpu-subnet", "enableExternalIps": True}
    assert node["serviceAccount"] == {}
    assert node["tags"] == ["tpubot-model"]  # the model firewall rule targets this tag
    assert node["labels"] == {"cost-center": "ml", "managed-by": "tpubot", "tpubot-team": "t01team",
                              "tpubot-channel": "c01chan", "tpubot-lease": "lease-a"}
    # One POST to the v2alpha1 collection with the caller's id; the LRO was polled on v2alpha1 too.
    posts = [r for r in sandbox.requests if r.method == "POST"]
    assert [(r.path, r.query["queuedResourceId"]) for r in posts] == [
        (f"/v2alpha1/projects/{PROJECT}/locations/{ZONE}/queuedResources", ["qr-a"])]
    assert all(r.path.startswith("/v2alpha1/") for r in sandbox.requests if "/operations/" in r.path)

    assert view.qr_id == "qr-a" and view.zone == ZONE and view.node_id == "node-qr-a"
    assert view.state == "WAITING_FOR_RESOURCES"  # the create LRO ends when the QR leaves CREATING
    assert view.labels["managed-by"] == "tpubot"
    # validUntilDuration came back as an absolute validUntilTime, 4h after creation.
    assert view.create_time is not None and view.valid_until_time is not None
    assert abs((view.valid_until_time - view.create_time) - timedelta(hours=4)) < timedelta(seconds=1)
    assert sandbox.create_attempts == [(ZONE, "accepted")]


def test_internal_endpoint_address_asks_for_no_external_ip(sandbox: TpuSandbox) -> None:
    with make_service(sandbox, external_ips=False, network_tags=("ml-model",)) as tpu:
        tpu.create_queued_resource(spec())
        sandbox.fast_forward(5)
        node = tpu.get_node(ZONE, "node-qr-a")
    request = sandbox.queued_resources()[0]["request"]["tpu"]["nodeSpec"][0]["node"]
    assert request["networkConfig"] == {"network": "default", "enableExternalIps": False}
    assert request["tags"] == ["ml-model"]
    assert node is not None and node.external_ip is None and node.internal_ip
    assert sandbox.rejected == []  # Google's schema accepts the body as sent


def test_state_walks_to_active_and_node_has_external_ip(sandbox: TpuSandbox, tpu: TpuService) -> None:
    # A long CREATING phase, observed while the create call is still waiting for its LRO.
    sandbox.timings = SandboxTimings(creating=3600, waiting=3600, provisioning=3600, deleting=0.05)
    created: list = []
    creator = threading.Thread(target=lambda: created.append(tpu.create_queued_resource(spec())), daemon=True)
    creator.start()
    assert wait_until(lambda: state_of(tpu, "qr-a") == "CREATING")
    assert tpu.get_node(ZONE, "node-qr-a") is None

    seen = ["CREATING"]
    for expected in ("WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"):
        sandbox.fast_forward(3600)
        wait_until(lambda expected=expected: state_of(tpu, "qr-a") == expected)
        seen.append(expected)
        if expected != "ACTIVE":
            assert tpu.get_node(ZONE, "node-qr-a") is None
    creator.join(timeout=10)
    assert created and created[0].state in ("WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE")
    assert seen == ["CREATING", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"]

    node = tpu.get_node(ZONE, "node-qr-a")
    assert node is not None
    assert (node.state, node.health, node.external_ip) == ("READY", "HEALTHY", "127.0.0.1")
    assert node.internal_ip and node.internal_ip.startswith("10.")
    assert node.labels["tpubot-lease"] == "lease-a"


def test_reaches_active_on_the_real_clock(sandbox: TpuSandbox, tpu: TpuService) -> None:
    tpu.create_queued_resource(spec())
    wait_until(lambda: state_of(tpu, "qr-a") == "ACTIVE", timeout=10)
    assert tpu.get_node(ZONE, "node-qr-a") is not None


def test_node_ready_hook_sets_the_endpoint_host(sandbox: TpuSandbox, tpu: TpuService) -> None:
    calls: list[tuple[str, str, dict]] = []

    def start_model(zone: str, node_id: str, labels: dict[str, str]) -> str:
        calls.append((zone, node_id, labels))
        return "10.9.8.7"

    sandbox.on_node_ready = start_model
    tpu.create_queued_resource(spec())
    sandbox.fast_forward(60)
    node = wait_until(lambda: tpu.get_node(ZONE, "node-qr-a"))
    assert node.external_ip == "10.9.8.7"
    assert tpu.get_node(ZONE, "node-qr-a").external_ip == "10.9.8.7"
    assert [(z, n, labels["tpubot-lease"]) for z, n, labels in calls] == [(ZONE, "node-qr-a", "lease-a")]


def test_conflict_adopts_the_existing_queued_resource(sandbox: TpuSandbox, tpu: TpuService) -> None:
    first = tpu.create_queued_resource(spec())
    second = tpu.create_queued_resource(spec())
    assert second.name == first.name and second.create_time == first.create_time
    assert len(sandbox.queued_resources()) == 1
    assert sandbox.create_attempts == [(ZONE, "accepted"), (ZONE, "already_exists")]


def test_concurrent_creates_of_one_id_make_one_queued_resource(sandbox: TpuSandbox, tpu: TpuService) -> None:
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(tpu.create_queued_resource(spec())), daemon=True)
               for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == 6 and len({view.name for view in results}) == 1
    assert len(sandbox.queued_resources()) == 1
    outcomes = sorted(outcome for _, outcome in sandbox.create_attempts)
    assert outcomes == ["accepted"] + ["already_exists"] * 5


# --- delete, list -------------------------------------------------------------------------------------

def test_force_delete_removes_qr_and_node_and_is_idempotent(sandbox: TpuSandbox, tpu: TpuService) -> None:
    tpu.create_queued_resource(spec())
    sandbox.fast_forward(60)
    assert wait_until(lambda: tpu.get_node(ZONE, "node-qr-a"))

    tpu.delete_queued_resource(ZONE, "qr-a")
    assert tpu.get_queued_resource(ZONE, "qr-a") is None
    assert tpu.get_node(ZONE, "node-qr-a") is None
    assert sandbox.queued_resources() == []
    deletes = [r for r in sandbox.requests if r.method == "DELETE"]
    assert deletes[0].query["force"] == ["true"]

    tpu.delete_queued_resource(ZONE, "qr-a")  # already gone: success
    tpu.delete_queued_resource(ZONE, "never-existed")


def test_delete_without_waiting_leaves_it_deleting(sandbox: TpuSandbox, tpu: TpuService) -> None:
    sandbox.timings = SandboxTimings(creating=0.01, waiting=0.01, provisioning=0.01, deleting=3600)
    tpu.create_queued_resource(spec())
    tpu.delete_queued_resource(ZONE, "qr-a", wait=False)
    assert state_of(tpu, "qr-a") == "DELETING"
    assert tpu.get_node(ZONE, "node-qr-a") is None
    sandbox.fast_forward(3600)
    assert wait_until(lambda: tpu.get_queued_resource(ZONE, "qr-a") is None)


def test_list_follows_pages_and_filters_by_label(sandbox: TpuSandbox, tpu: TpuService) -> None:
    sandbox.max_page_size = 2
    for index in range(5):
        tpu.create_queued_resource(spec(f"qr-{index}", lease="lease-x" if index % 2 == 0 else "lease-y"))
    before = len([r for r in sandbox.requests if r.method == "GET" and r.path.endswith("/queuedResources")])

    everything = tpu.list_queued_resources(ZONE)
    assert sorted(v.qr_id for v in everything) == [f"qr-{i}" for i in range(5)]
    pages = [r for r in sandbox.requests if r.method == "GET" and r.path.endswith("/queuedResources")][before:]
    assert len(pages) == 3 and "pageToken" in pages[1].query  # 2 + 2 + 1

    mine = tpu.list_queued_resources(ZONE, {"managed-by": "tpubot", "tpubot-lease": "lease-x"})
    assert sorted(v.qr_id for v in mine) == ["qr-0", "qr-2", "qr-4"]
    assert tpu.list_queued_resources(ZONE, {"managed-by": "someone-else"}) == []
    assert tpu.list_queued_resources("us-central1-a") == []


# --- flex-start expiry ---------------------------------------------------------------------------------

def test_suspended_by_the_service_after_max_run_duration(sandbox: TpuSandbox, tpu: TpuService) -> None:
    tpu.create_queued_resource(spec(max_run_duration=timedelta(hours=1)))
    sandbox.fast_forward(10)
    wait_until(lambda: state_of(tpu, "qr-a") == "ACTIVE")
    assert tpu.get_node(ZONE, "node-qr-a") is not None

    sandbox.fast_forward(3600)
    view = wait_until(lambda: (v := tpu.get_queued_resource(ZONE, "qr-a")) and v.state == "SUSPENDED" and v)
    assert view.state_initiator == "SERVICE"
    assert view.state.is_terminal and classify_failed_qr(view) is None
    assert tpu.get_node(ZONE, "node-qr-a") is None
    # SUSPENDED QRs stay listed (they may hold quota) until deleted.
    assert [v.qr_id for v in tpu.list_queued_resources(ZONE, {"managed-by": "tpubot"})] == ["qr-a"]


# --- classified errors ----------------------------------------------------------------------------------

def test_zone_rejecting_flex_start(sandbox: TpuSandbox, tpu: TpuService) -> None:
    sandbox.set_zone("europe-west4-a", ZoneBehaviour.REJECT_FLEX_START)
    with pytest.raises(TpuError) as caught:
        tpu.create_queued_resource(spec(zone="europe-west4-a"))
    error = caught.value
    assert error.kind is TpuErrorKind.FLEX_START_UNSUPPORTED
    assert error.zone == "europe-west4-a" and error.code == 3 and not error.retryable
    assert error.kind.scope is ErrorScope.ZONE and error.kind.suggested_skip >= timedelta(days=1)
    assert 'FLEX_START provisioning model is not supported for accelerator type "v5litepod-1"' in error.message
    assert sandbox.queued_resources() == []
    assert sandbox.create_attempts == [("europe-west4-a", "flex_start_rejected")]


def test_quota_exceeded_names_the_region(sandbox: TpuSandbox, tpu: TpuService) -> None:
    sandbox.set_zone("us-central1-a", ZoneBehaviour.QUOTA_EXCEEDED)
    with pytest.raises(TpuError) as caught:
        tpu.create_queued_resource(spec(zone="us-central1-a"))
    error = caught.value
    assert error.kind is TpuErrorKind.QUOTA_EXCEEDED and error.region == "us-central1"
    assert error.kind.scope is ErrorScope.REGION and not error.retryable
    assert "TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI" in error.message
    assert not error.message.startswith("POST ")  # the API's words, not the request line
    # 429 quota errors are not retried: exactly one POST.
    assert len([r for r in sandbox.requests if r.method == "POST"]) == 1


def test_missing_network_is_a_configuration_error(sandbox: TpuSandbox) -> None:
    tpu = make_service(sandbox, network="prod-vpc")
    with pytest.raises(TpuError) as caught:
        tpu.create_queued_resource(spec())
    error = caught.value
    assert error.kind is TpuErrorKind.NETWORK_NOT_FOUND and error.setting == "NETWORK"
    assert error.kind.stops_search and "prod-vpc" in error.fix
    assert f'Project "{PROJECT}" has no network named "prod-vpc".' in error.message
    assert sandbox.queued_resources() == [] and sandbox.create_attempts == [(ZONE, "network_not_found")]
    tpu.close()


def test_unknown_zone(sandbox: TpuSandbox, tpu: TpuService) -> None:
    with pytest.raises(TpuError) as caught:
        tpu.create_queued_resource(spec(zone="asia-northeast1-a"))
    assert caught.value.kind is TpuErrorKind.ZONE_NOT_SUPPORTED
    assert caught.value.zone == "asia-northeast1-a" and caught.value.setting == "TPU_ZONES"
    with pytest.raises(TpuError) as on_read:
        tpu.get_queued_resource("asia-northeast1-a", "qr-a")
    assert on_read.value.kind is TpuErrorKind.ZONE_NOT_SUPPORTED


def test_bad_accelerator_runtime_and_project(sandbox: TpuSandbox) -> None:
    cases = [
        ({"accelerator_type": "v5e-1"}, PROJECT, TpuErrorKind.INVALID_ACCELERATOR, "TPU_ACCELERATOR_TYPE"),
        ({"runtime_version": "tpu-vm-tf-2.16"}, PROJECT, TpuErrorKind.INVALID_RUNTIME, "TPU_RUNTIME_VERSION"),
        ({}, "someone-elses-project", TpuErrorKind.PERMISSION_DENIED, "GCP_PROJECT"),
    ]
    for overrides, project, kind, setting in cases:
        tpu = TpuService(TpuConfig(project=project, api_endpoint=sandbox.base_url, **overrides),  # type: ignore[arg-type]
                         AnonymousCredentials(), retry_base_delay=0.01, lro_poll_interval=0.02)
        with tpu, pytest.raises(TpuError) as caught:
            tpu.create_queued_resource(spec())
        assert (caught.value.kind, caught.value.setting) == (kind, setting), caught.value
        assert caught.value.kind.stops_search
    assert sandbox.queued_resources() == []
    assert [outcome for _, outcome in sandbox.create_attempts] == ["bad_accelerator", "bad_runtime",
                                                                   "permission_denied"]


def test_no_capacity_fails_at_valid_until(sandbox: TpuSandbox, tpu: TpuService) -> None:
    sandbox.set_zone("us-west1-c", ZoneBehaviour.NO_CAPACITY)
    view = tpu.create_queued_resource(spec(zone="us-west1-c", valid_until_duration=timedelta(hours=1)))
    assert view.state == "WAITING_FOR_RESOURCES" and classify_failed_qr(view) is None
    sandbox.fast_forward(1800)
    assert state_of(tpu, "qr-a", "us-west1-c") == "WAITING_FOR_RESOURCES"

    sandbox.fast_forward(1801)
    failed = wait_until(lambda: (v := tpu.get_queued_resource("us-west1-c", "qr-a")) and v.state == "FAILED" and v)
    assert failed.failure_code == 8 and "There is no more capacity in the zone" in failed.failure_message
    error = classify_failed_qr(failed)
    assert error is not None and error.kind is TpuErrorKind.NO_CAPACITY and error.zone == "us-west1-c"
    assert error.kind.suggested_skip <= timedelta(hours=1)
    assert tpu.get_node("us-west1-c", "node-qr-a") is None


def test_capacity_freed_later_provisions_a_waiting_request(sandbox: TpuSandbox, tpu: TpuService) -> None:
    sandbox.set_zone("us-west1-c", ZoneBehaviour.NO_CAPACITY)
    tpu.create_queued_resource(spec(zone="us-west1-c"))
    sandbox.fast_forward(600)
    assert state_of(tpu, "qr-a", "us-west1-c") == "WAITING_FOR_RESOURCES"
    sandbox.set_zone("us-west1-c", ZoneBehaviour.ACCEPT)
    sandbox.fast_forward(60)
    wait_until(lambda: state_of(tpu, "qr-a", "us-west1-c") == "ACTIVE")


# --- transient failures ----------------------------------------------------------------------------------

def test_transient_503_is_retried(sandbox: TpuSandbox, tpu: TpuService) -> None:
    sandbox.inject_failures(2, http_status=503)
    view = tpu.create_queued_resource(spec())
    assert view.qr_id == "qr-a"
    assert len([r for r in sandbox.requests if r.method == "POST"]) == 3  # 503, 503, created

    sandbox.inject_failures(2, http_status=503, path_contains="/queuedResources/qr-a")
    assert tpu.get_queued_resource(ZONE, "qr-a") is not None


def test_persistent_503_gives_up_as_unavailable(sandbox: TpuSandbox, tpu: TpuService) -> None:
    sandbox.inject_failures(3, http_status=503)
    with pytest.raises(TpuError) as caught:
        tpu.get_queued_resource(ZONE, "qr-a")
    assert caught.value.kind is TpuErrorKind.UNAVAILABLE and caught.value.retryable
    assert len(sandbox.requests) == 3  # max_attempts, then it gives up


def test_rate_limit_is_retried_and_distinguished_from_quota(sandbox: TpuSandbox, tpu: TpuService) -> None:
    sandbox.inject_failures(1, http_status=429)
    assert tpu.list_queued_resources(ZONE) == []
    sandbox.inject_failures(5, http_status=429)
    with pytest.raises(TpuError) as caught:
        tpu.list_queued_resources(ZONE)
    assert caught.value.kind is TpuErrorKind.RATE_LIMITED and caught.value.retryable


def test_unreachable_endpoint_is_unavailable() -> None:
    with TpuSandbox() as box:
        url = box.base_url
    tpu = TpuService(TpuConfig(project=PROJECT, api_endpoint=url, timeout=2.0), AnonymousCredentials(),
                     retry_base_delay=0.01)
    with pytest.raises(TpuError) as caught:
        tpu.get_queued_resource(ZONE, "qr-a")
    assert caught.value.kind is TpuErrorKind.UNAVAILABLE and caught.value.retryable
