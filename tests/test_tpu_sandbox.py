"""The TPU REST emulator's wire format, checked with the real google clients.

These pin what makes the emulator safe to build on: the typed v2 client (integer enums,
`$alt=json;enum-encoding=int`, its strict LRO parser) and a raw v2alpha1 session both work against
it, error bodies have Google's shape, and the control surface (hooks, clock, fault injection,
the `tpubot sandbox` process) behaves as documented.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import requests
import waiting
from google.api_core import exceptions as gexc
from google.api_core.future import polling
from google.auth import exceptions as auth_exc
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import tpu_v2

from infra.sandbox.tpu_api import SandboxTimings, TpuSandbox, ZoneBehaviour
from infra.tpu import (
    QrSpec,
    TpuConfig,
    TpuService,
    bot_labels,
    flex_start_body,
    label_value,
)
from infra.tpu_errors import (
    TpuErrorKind,
    classify_exception,
    classify_http,
    classify_status,
)

T = TypeVar("T")
PROJECT = "tpubot-sandbox"
ZONE = "us-west4-a"
FAST_POLL = polling.DEFAULT_POLLING.with_delay(initial=0.01, maximum=0.05, multiplier=1.5).with_timeout(10)
REPO = Path(__file__).resolve().parents[1]


wait_until = functools.partial(waiting.wait_until, timeout=10.0, interval=0.02)


@pytest.fixture
def sandbox() -> Iterator[TpuSandbox]:
    with TpuSandbox(timings=SandboxTimings(creating=0.05, waiting=0.1, provisioning=0.1, deleting=0.05)) as box:
        yield box


@pytest.fixture
def client(sandbox: TpuSandbox) -> tpu_v2.TpuClient:
    return tpu_v2.TpuClient(transport="rest", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": sandbox.base_url})


@pytest.fixture
def session() -> Iterator[AuthorizedSession]:
    with AuthorizedSession(AnonymousCredentials()) as s:
        yield s


def flex_start_create(sandbox: TpuSandbox, session: AuthorizedSession, qr_id: str = "qr-a", zone: str = ZONE,
                      **config: object) -> requests.Response:
    body = flex_start_body(TpuConfig(project=PROJECT, **config),  # type: ignore[arg-type]
                           QrSpec(qr_id, f"node-{qr_id}", zone, bot_labels("T1", "C1", "L1"), "#!/bin/bash\n"))
    return session.post(f"{sandbox.base_url}/v2alpha1/projects/{PROJECT}/locations/{zone}/queuedResources",
                        params={"queuedResourceId": qr_id}, json=body, timeout=5)


# --- the typed v2 client --------------------------------------------------------------------------

@pytest.fixture
def waiting_sandbox() -> Iterator[TpuSandbox]:
    """A sandbox whose queued resources stay WAITING_FOR_RESOURCES until fast_forward moves them."""
    with TpuSandbox(timings=SandboxTimings(creating=0.05, waiting=3600, provisioning=0.1, deleting=0.05)) as box:
        yield box


def test_typed_v2_client_create_and_lro_result(waiting_sandbox: TpuSandbox) -> None:
    sandbox = waiting_sandbox
    client = tpu_v2.TpuClient(transport="rest", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": sandbox.base_url})
    resource = tpu_v2.QueuedResource(
        tpu=tpu_v2.QueuedResource.Tpu(node_spec=[tpu_v2.QueuedResource.Tpu.NodeSpec(
            parent=f"projects/{PROJECT}/locations/{ZONE}", node_id="node-v2",
            node=tpu_v2.Node(accelerator_type="v5litepod-1", runtime_version="v2-alpha-tpuv5-lite",
                             network_config=tpu_v2.NetworkConfig(network="default", enable_external_ips=True)))]),
        spot=tpu_v2.QueuedResource.Spot(),
    )
    operation = client.create_queued_resource(parent=f"projects/{PROJECT}/locations/{ZONE}",
                                              queued_resource=resource, queued_resource_id="qr-v2")
    created = operation.result(timeout=10, polling=FAST_POLL)
    assert created.name.endswith("/queuedResources/qr-v2")
    assert created.state.state == tpu_v2.QueuedResourceState.State.WAITING_FOR_RESOURCES
    assert isinstance(operation.metadata, tpu_v2.OperationMetadata) and operation.metadata.verb == "create"

    # The client asked for integer enums and got them; the body it sent used integers where it had enums.
    [post] = [r for r in sandbox.requests if r.method == "POST"]
    assert "enum-encoding=int" in post.query["$alt"][0]
    get = client.get_queued_resource(name=created.name)
    raw = requests.get(f"{sandbox.base_url}/v2/{created.name}", params={"$alt": "json;enum-encoding=int"}, timeout=5)
    assert raw.json()["state"]["state"] == 9 and get.state.state.name == "WAITING_FOR_RESOURCES"
    assert requests.get(f"{sandbox.base_url}/v2/{created.name}", timeout=5).json()["state"]["state"] == \
        "WAITING_FOR_RESOURCES"
    # Without FLEX_START no run duration applies: it never suspends.
    sandbox.fast_forward(30 * 86400)
    assert client.get_queued_resource(name=created.name).state.state.name == "ACTIVE"

    nodes = list(client.list_nodes(parent=f"projects/{PROJECT}/locations/{ZONE}"))
    assert [n.name.rsplit("/", 1)[-1] for n in nodes] == ["node-v2"]
    assert nodes[0].network_endpoints[0].access_config.external_ip == "127.0.0.1"

    delete = client.delete_queued_resource(request={"name": created.name, "force": True})
    delete.result(timeout=10, polling=FAST_POLL)
    with pytest.raises(gexc.NotFound):
        client.get_queued_resource(name=created.name)


def test_v2_operation_of_a_flex_start_create_has_only_v2_fields(sandbox: TpuSandbox, client: tpu_v2.TpuClient,
                                                                  session: AuthorizedSession) -> None:
    response = flex_start_create(sandbox, session)
    assert response.status_code == 200
    operation = response.json()
    assert operation["metadata"]["@type"] == "type.googleapis.com/google.cloud.tpu.v2alpha1.OperationMetadata"
    assert operation["name"].startswith(f"projects/{PROJECT}/locations/{ZONE}/operations/operation-")

    alpha = wait_until(lambda: (op := session.get(f"{sandbox.base_url}/v2alpha1/{operation['name']}",
                                                  timeout=5).json())["done"] and op)
    assert alpha["response"]["@type"] == "type.googleapis.com/google.cloud.tpu.v2alpha1.QueuedResource"
    assert alpha["response"]["provisioningModel"] == "FLEX_START"
    assert alpha["response"]["runDuration"] == {"maxRunDuration": "14400s"}
    assert "validUntilTime" in alpha["response"]["queueingPolicy"]

    # The v2 mixin parses strictly: an alpha-only field in the response would raise ParseError.
    v2_operation = client.get_operation(request={"name": operation["name"]})
    assert v2_operation.done
    unpacked = tpu_v2.QueuedResource.pb()()
    assert v2_operation.response.Unpack(unpacked)
    assert unpacked.name.endswith("/queuedResources/qr-a") and unpacked.tpu.node_spec[0].node_id == "node-qr-a"
    # Resource GETs on v2 don't carry the alpha fields either; on v2alpha1 they do.
    v2_json = session.get(f"{sandbox.base_url}/v2/projects/{PROJECT}/locations/{ZONE}/queuedResources/qr-a",
                          timeout=5).json()
    alpha_json = session.get(f"{sandbox.base_url}/v2alpha1/projects/{PROJECT}/locations/{ZONE}/queuedResources/qr-a",
                             timeout=5).json()
    assert "provisioningModel" not in v2_json and alpha_json["provisioningModel"] == "FLEX_START"


def test_integer_enum_in_a_create_body_is_accepted(sandbox: TpuSandbox, session: AuthorizedSession) -> None:
    body = flex_start_body(TpuConfig(project=PROJECT),
                           QrSpec("qr-int", "node-int", ZONE, {}, "#!/bin/bash\n"))
    body["provisioningModel"] = 4  # FLEX_START as a number
    sandbox.set_zone(ZONE, ZoneBehaviour.REJECT_FLEX_START)  # proves it was read as FLEX_START
    operation = session.post(f"{sandbox.base_url}/v2alpha1/projects/{PROJECT}/locations/{ZONE}/queuedResources",
                             params={"queuedResourceId": "qr-int"}, json=body, timeout=5).json()
    done = wait_until(lambda: (op := session.get(f"{sandbox.base_url}/v2alpha1/{operation['name']}",
                                                 timeout=5).json())["done"] and op)
    assert done["error"]["code"] == 3 and "FLEX_START provisioning model is not supported" in done["error"]["message"]


def test_error_bodies_have_googles_shape(sandbox: TpuSandbox, session: AuthorizedSession) -> None:
    missing = session.get(f"{sandbox.base_url}/v2/projects/{PROJECT}/locations/{ZONE}/queuedResources/nope",
                          timeout=5)
    assert missing.status_code == 404
    error = missing.json()["error"]
    assert (error["code"], error["status"]) == (404, "NOT_FOUND")
    assert error["message"] == f"Resource 'projects/{PROJECT}/locations/{ZONE}/queuedResources/nope' was not found"
    assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.ResourceInfo"

    sandbox.set_zone(ZONE, ZoneBehaviour.QUOTA_EXCEEDED)
    quota = flex_start_create(sandbox, session)
    assert quota.status_code == 429 and quota.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert quota.json()["error"]["message"].startswith(
        "Quota 'TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI' exhausted.")
    exc = gexc.from_http_response(quota)
    assert isinstance(exc, gexc.TooManyRequests) and exc.reason == "QUOTA_EXCEEDED"

    bad_zone = session.get(f"{sandbox.base_url}/v2/projects/{PROJECT}/locations/mars-east1-a/nodes", timeout=5)
    assert bad_zone.status_code == 400
    assert bad_zone.json()["error"]["message"].startswith(
        'Cloud TPU received a bad request. The requested zone "mars-east1-a" is not supported. [EID: 0x')


def test_non_forced_delete_of_a_running_qr_is_refused(sandbox: TpuSandbox, client: tpu_v2.TpuClient,
                                                      session: AuthorizedSession) -> None:
    flex_start_create(sandbox, session)
    sandbox.fast_forward(60)
    name = f"projects/{PROJECT}/locations/{ZONE}/queuedResources/qr-a"
    wait_until(lambda: client.get_queued_resource(name=name).state.state.name == "ACTIVE")
    with pytest.raises(gexc.BadRequest) as refused:
        client.delete_queued_resource(request={"name": name, "force": False})
    assert "force=true" in refused.value.message
    assert client.get_queued_resource(name=name).state.state.name == "ACTIVE"


def test_pagination_tokens(sandbox: TpuSandbox, session: AuthorizedSession) -> None:
    for index in range(3):
        assert flex_start_create(sandbox, session, f"qr-{index}").status_code == 200
    url = f"{sandbox.base_url}/v2/projects/{PROJECT}/locations/{ZONE}/queuedResources"
    first = session.get(url, params={"pageSize": 2}, timeout=5).json()
    assert len(first["queuedResources"]) == 2 and first["nextPageToken"]
    second = session.get(url, params={"pageSize": 2, "pageToken": first["nextPageToken"]}, timeout=5).json()
    assert len(second["queuedResources"]) == 1 and "nextPageToken" not in second
    names = {r["name"] for r in first["queuedResources"] + second["queuedResources"]}
    assert len(names) == 3
    assert session.get(url, params={"pageToken": "garbage!"}, timeout=5).status_code == 400


# --- control surface ---------------------------------------------------------------------------------

def test_node_hooks_run_once_per_node(sandbox: TpuSandbox) -> None:
    ready: list[str] = []
    gone: list[str] = []
    sandbox.on_node_ready = lambda zone, node_id, labels: ready.append(node_id) or None
    sandbox.on_node_gone = lambda zone, node_id: gone.append(node_id)
    tpu = TpuService(TpuConfig(project=PROJECT, api_endpoint=sandbox.base_url), AnonymousCredentials(),
                     retry_base_delay=0.01, lro_poll_interval=0.02)
    tpu.create_queued_resource(QrSpec("qr-a", "node-a", ZONE, {}, "#!/bin/bash\n"))
    sandbox.fast_forward(60)
    node = wait_until(lambda: tpu.get_node(ZONE, "node-a"))
    assert node.external_ip == sandbox.external_ip  # hook returned None: the default address
    tpu.get_node(ZONE, "node-a")
    assert ready == ["node-a"] and gone == []
    tpu.delete_queued_resource(ZONE, "qr-a")
    assert gone == ["node-a"]
    tpu.close()


def test_timings_scale_and_fast_forward(sandbox: TpuSandbox) -> None:
    slow = TpuSandbox(timings=SandboxTimings(creating=10, waiting=10, provisioning=10), time_scale=0.5)
    assert slow.timings.creating == 5 and slow.timings.provisioning == 5
    before = sandbox.now()
    sandbox.fast_forward(3600)
    assert sandbox.now() - before >= 3600


# Ctrl-C as a terminal gives it: a test run started in the background (`cmd &` in a script, a CI
# runner) inherits SIGINT ignored, and a process started so keeps ignoring it, as POSIX intends
# for background jobs (Python itself installs its handler only when SIGINT is not ignored).
# `tpubot sandbox` honours that; the test, which stands for a person at a terminal, restores it.
AS_FROM_A_TERMINAL = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "


@pytest.mark.e2e
def test_sandbox_command_serves_until_interrupted() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL + "from bot.cli import main; main()", "sandbox",
                                "--port", "0"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        base_url = process.stdout.readline().strip()  # the first line is the base URL
        assert base_url.startswith("http://127.0.0.1:"), process.stderr.read() if process.poll() is not None else base_url
        lines = [process.stdout.readline() for _ in range(3)]
        assert "checked against Google's discovery documents" in lines[1]
        # Every endpoint setting is printed, so a half-pointed bot or doctor never reaches the real APIs.
        for name in ("TPU_API_ENDPOINT=" + base_url, "COMPUTE_API_ENDPOINT=http://127.0.0.1:",
                     "QUOTAS_API_ENDPOINT=http://127.0.0.1:", "SECRETMANAGER_API_ENDPOINT=http://127.0.0.1:"):
            assert name in lines[2]
        tpu = TpuService(TpuConfig(project=PROJECT, api_endpoint=base_url, timeout=5), AnonymousCredentials())
        assert tpu.list_queued_resources(ZONE) == []
        tpu.close()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)


# --- classification of the texts seen in the wild (reference §4.3) ------------------------------------

@pytest.mark.parametrize(
    ("code", "message", "kind", "zone", "region", "setting"),
    [
        (3, 'FLEX_START provisioning model is not supported for accelerator type "v6e-4" in location "asia-east1-c"',
         TpuErrorKind.FLEX_START_UNSUPPORTED, "asia-east1-c", "asia-east1", None),
        (8, 'There is no more capacity in the zone "us-central1-c"; you can try in another zone where Cloud TPU '
            "Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x1f2e3d]",
         TpuErrorKind.NO_CAPACITY, "us-central1-c", "us-central1", None),
        (8, "Insufficient reserved capacity. Contact customer support to increase your reservation.",
         TpuErrorKind.NO_CAPACITY, None, None, None),
        (8, "Quota 'TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI' exhausted. Limit 10000 in region us-west4",
         TpuErrorKind.QUOTA_EXCEEDED, None, "us-west4", None),
        (9, 'Project "my-proj" has no network named "default".', TpuErrorKind.NETWORK_NOT_FOUND, None, None, "NETWORK"),
        (5, "The resource 'projects/my-proj/global/networks/default' was not found",
         TpuErrorKind.NETWORK_NOT_FOUND, None, None, "NETWORK"),
        (5, "NOT_FOUND: Resource 'projects/P/locations/us-west4-a/nodes/N' was not found",
         TpuErrorKind.NOT_FOUND, None, None, None),
    ],
)
def test_classify_rpc_status_texts(code: int, message: str, kind: TpuErrorKind, zone: str | None,
                                   region: str | None, setting: str | None) -> None:
    error = classify_status(code, message)
    assert (error.kind, error.zone, error.region, error.setting) == (kind, zone, region, setting)
    assert error.message == message and error.code == code


@pytest.mark.parametrize(
    ("status", "message", "kind", "setting", "retryable"),
    [
        (429, "Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region "
              "us-east5.", TpuErrorKind.QUOTA_EXCEEDED, None, False),
        (429, "Maximum number of CreateNode requests per minute exceeded.", TpuErrorKind.RATE_LIMITED, None, True),
        (400, 'Cloud TPU received a bad request. The requested zone "asia-northeast1-a" is not supported. '
              "[EID: 0xabc]", TpuErrorKind.ZONE_NOT_SUPPORTED, "TPU_ZONES", False),
        (400, 'Cloud TPU received a bad request. The requested accelerator configuration for accelerator type, '
              '"v6e-4", could not be found in the zonal accelerator configurations for "asia-east1-a".; the '
              "accelerator v6e-4 was not found in zone asia-east1-a [EID: 0xabc]",
         TpuErrorKind.INVALID_ACCELERATOR, "TPU_ACCELERATOR_TYPE", False),
        (403, "Permission 'tpu.queuedResources.create' denied on resource '//tpu.googleapis.com/projects/p/"
              "locations/us-west4-a' (or it may not exist).", TpuErrorKind.PERMISSION_DENIED, "GCP_PROJECT", False),
        (401, "Request had invalid authentication credentials.", TpuErrorKind.PERMISSION_DENIED,
         "GOOGLE_APPLICATION_CREDENTIALS", False),
        (503, "The service is currently unavailable.", TpuErrorKind.UNAVAILABLE, None, True),
        (504, "Deadline exceeded.", TpuErrorKind.UNAVAILABLE, None, True),
        (409, "Resource 'projects/p/locations/z/queuedResources/q' already exists.", TpuErrorKind.ALREADY_EXISTS,
         None, False),
    ],
)
def test_classify_http_texts(status: int, message: str, kind: TpuErrorKind, setting: str | None,
                             retryable: bool) -> None:
    error = classify_http(status, message, zone="us-west4-a")
    assert (error.kind, error.setting, error.retryable) == (kind, setting, retryable)
    if kind is TpuErrorKind.QUOTA_EXCEEDED:
        assert error.region == "us-east5" and "TPUV6EPreemptiblePerProjectPerRegionForTPUAPI" in error.fix


def test_classify_library_exceptions() -> None:
    lro = gexc.from_grpc_status(3, 'FLEX_START provisioning model is not supported for accelerator type '
                                   '"v5litepod-1" in location "europe-west4-a"')
    assert classify_exception(lro).kind is TpuErrorKind.FLEX_START_UNSUPPORTED
    assert classify_exception(gexc.ServiceUnavailable("down")).retryable
    assert classify_exception(requests.ConnectionError("refused")).kind is TpuErrorKind.UNAVAILABLE
    missing = classify_exception(auth_exc.DefaultCredentialsError("Your default credentials were not found."))
    assert missing.kind is TpuErrorKind.PERMISSION_DENIED and missing.setting == "GOOGLE_APPLICATION_CREDENTIALS"
    assert classify_exception(ValueError("?")).kind is TpuErrorKind.UNKNOWN


def test_label_values_are_valid_gcp_labels() -> None:
    labels = bot_labels("T01ABC", "C0/Weird Name!", "L" * 80)
    assert labels["managed-by"] == "tpubot"
    assert labels["tpubot-team"] == "t01abc" and labels["tpubot-channel"] == "c0-weird-name-"
    assert all(len(v) <= 63 and all(c.islower() or c.isdigit() or c in "_-" for c in v) for v in labels.values())
    assert label_value("Ünïcode") == "-n-code"
