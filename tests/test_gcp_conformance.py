"""The GCP emulators reject what Google rejects, checked through the real google-auth / google-cloud clients.

Each emulator validates every request against Google's discovery document (the copies shipped in
google-api-python-client) or, for Cloud Quotas, the google-cloud-quotas protos: an unknown field,
query parameter, enum value or malformed duration gets Google's 400 INVALID_ARGUMENT naming the
field, and the emulator's own responses are checked against the same schemas.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import cloudquotas_v1, logging as cloud_logging, secretmanager_v1

from infra.deployment_mode import DeploymentMode
from infra.preflight import PreflightConfig, check_cache_bucket, check_egress
from infra.sandbox.discovery import strict_available
from infra.sandbox.gcp_project_api import GcpProjectSandbox
from infra.sandbox.logging_api import LoggingEmulator, generate_entries
from infra.sandbox.tpu_api import SandboxTimings, TpuSandbox
from infra.tpu import QrSpec, TpuConfig, TpuService, bot_labels, flex_start_body

PROJECT = "tpubot-sandbox"
ZONE = "us-west4-a"
QUOTA = "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI"


@pytest.fixture
def session() -> Iterator[AuthorizedSession]:
    with AuthorizedSession(AnonymousCredentials()) as s:
        yield s


@pytest.fixture
def tpu() -> Iterator[TpuSandbox]:
    with TpuSandbox(timings=SandboxTimings(creating=0.02, waiting=0.05, provisioning=0.05, deleting=0.02)) as box:
        yield box


NAT_ROUTER = {"name": "nat-router", "region": "us-west4", "network": "default",
              "nats": [{"name": "egress", "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES",
                        "natIpAllocateOption": "AUTO_ONLY"}]}


@pytest.fixture
def project_api() -> Iterator[GcpProjectSandbox]:
    with GcpProjectSandbox(PROJECT, quotas={QUOTA: {ZONE: 8}}, secrets_={"hf-token": "hf_x"},
                           firewalls=[{"name": "allow-model", "network": "default", "sourceRanges": ["10.0.0.0/8"],
                                       "allowed": [{"IPProtocol": "tcp", "ports": ["8000"]}],
                                       "targetTags": ["tpubot-model"]}],
                           routers=[NAT_ROUTER], buckets={"xla-cache": "US-WEST4"}) as box:
        yield box


def assert_google_400(response, field: str, name: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert f'"{name}"' in error["message"] or f"'{name}'" in error["message"], error["message"]
    [violation] = error["details"][0]["fieldViolations"]
    assert violation["field"] == field
    # The google client turns it into BadRequest, with the message intact.
    exc = gexc.from_http_response(response)
    assert isinstance(exc, gexc.BadRequest) and name in exc.message


def flex_body() -> dict:
    return flex_start_body(TpuConfig(project=PROJECT), QrSpec("qr-a", "node-a", ZONE, bot_labels("T", "C", "L"),
                                                              "#!/bin/bash\n"))


def test_the_test_environment_is_strict(tpu: TpuSandbox, project_api: GcpProjectSandbox) -> None:
    assert strict_available()
    assert tpu.strict and project_api.strict and LoggingEmulator(PROJECT, []).strict


# --- an unknown field, to each emulator -------------------------------------------------------------

def test_tpu_rejects_an_unknown_body_field_by_name(tpu: TpuSandbox, session: AuthorizedSession) -> None:
    body = flex_body()
    body["tpu"]["nodeSpec"][0]["node"]["networkConfig"]["enableExternalIp"] = True  # the plural is right
    response = session.post(f"{tpu.base_url}/v2alpha1/projects/{PROJECT}/locations/{ZONE}/queuedResources",
                            params={"queuedResourceId": "qr-a"}, json=body, timeout=5)
    assert_google_400(response, "queued_resource.tpu.node_spec[0].node.network_config", "enableExternalIp")
    assert response.json()["error"]["message"] == (
        'Invalid JSON payload received. Unknown name "enableExternalIp" at '
        "'queued_resource.tpu.node_spec[0].node.network_config': Cannot find field.")
    assert tpu.queued_resources() == [] and tpu.create_attempts == []  # nothing was created


def test_tpu_rejects_an_unknown_enum_and_a_bad_duration(tpu: TpuSandbox, session: AuthorizedSession) -> None:
    url = f"{tpu.base_url}/v2alpha1/projects/{PROJECT}/locations/{ZONE}/queuedResources"
    body = flex_body() | {"provisioningModel": "FLEX"}
    response = session.post(url, params={"queuedResourceId": "qr-a"}, json=body, timeout=5)
    assert_google_400(response, "queued_resource.provisioning_model", "queued_resource.provisioning_model")
    assert response.json()["error"]["message"].endswith('ProvisioningModel), "FLEX"')
    body = flex_body() | {"runDuration": {"maxRunDuration": "4h"}}
    response = session.post(url, params={"queuedResourceId": "qr-a"}, json=body, timeout=5)
    assert_google_400(response, "queued_resource.run_duration.max_run_duration",
                      "queued_resource.run_duration.max_run_duration")


def test_tpu_rejects_an_unknown_query_parameter(tpu: TpuSandbox, session: AuthorizedSession) -> None:
    response = session.get(f"{tpu.base_url}/v2/projects/{PROJECT}/locations/{ZONE}/queuedResources",
                           params={"pageSize": 5, "filter": "labels.managed-by=tpubot"}, timeout=5)
    assert_google_400(response, "filter", "filter")  # v2 queuedResources.list has no server-side filter
    assert "Cannot bind query parameter" in response.json()["error"]["message"]


def test_logging_rejects_an_unknown_body_field(session: AuthorizedSession) -> None:
    with LoggingEmulator(PROJECT, generate_entries(PROJECT, 5)) as server:
        response = session.post(f"{server.url}/v2/entries:list",
                                json={"resourceNames": [f"projects/{PROJECT}"], "maxResults": 5}, timeout=5)
        assert_google_400(response, "maxResults", "maxResults")  # max_results is applied client-side
        assert server.requests == []  # refused before it was served


def test_secret_manager_rejects_an_unknown_body_field(project_api: GcpProjectSandbox,
                                                      session: AuthorizedSession) -> None:
    response = session.post(f"{project_api.base_url}/v1/projects/{PROJECT}/secrets", params={"secretId": "k"},
                            json={"replication": {"automatic": {}}, "ttlSeconds": 60}, timeout=5)
    assert_google_400(response, "secret", "ttlSeconds")
    assert "k" not in project_api.secrets


def test_compute_rejects_an_unknown_query_parameter(project_api: GcpProjectSandbox,
                                                    session: AuthorizedSession) -> None:
    response = session.get(f"{project_api.base_url}/compute/v1/projects/{PROJECT}/global/firewalls",
                           params={"pageSize": 50}, timeout=5)  # Compute pages with maxResults
    assert_google_400(response, "pageSize", "pageSize")
    assert response.json()["error"]["errors"][0]["reason"] == "invalid"


def test_compute_routers_and_storage_reject_an_unknown_query_parameter(project_api: GcpProjectSandbox,
                                                                      session: AuthorizedSession) -> None:
    response = session.get(f"{project_api.base_url}/compute/v1/projects/{PROJECT}/regions/us-west4/routers",
                           params={"network": "default"}, timeout=5)  # routers.list filters with `filter`
    assert_google_400(response, "network", "network")
    assert response.json()["error"]["errors"][0]["reason"] == "invalid"
    response = session.get(f"{project_api.base_url}/storage/v1/b/xla-cache", params={"fields": "location"},
                           timeout=5)  # `fields` is one of the standard parameters every method takes
    assert response.status_code == 200, response.text
    response = session.get(f"{project_api.base_url}/storage/v1/b/xla-cache", params={"region": "us-west4"}, timeout=5)
    assert_google_400(response, "region", "region")


def test_a_missing_bucket_and_router_answer_as_storage_and_compute_do(project_api: GcpProjectSandbox,
                                                                     session: AuthorizedSession) -> None:
    response = session.get(f"{project_api.base_url}/storage/v1/b/no-such-bucket", timeout=5)
    assert response.status_code == 404
    assert response.json() == {"error": {"code": 404, "message": "The specified bucket does not exist.", "errors": [
        {"message": "The specified bucket does not exist.", "domain": "global", "reason": "notFound"}]}}
    assert isinstance(gexc.from_http_response(response), gexc.NotFound)
    response = session.get(f"{project_api.base_url}/compute/v1/projects/{PROJECT}/regions/us-west4/routers/nope",
                           timeout=5)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["message"] == f"The resource 'projects/{PROJECT}/regions/us-west4/routers/nope' was not found"
    assert error["errors"][0]["reason"] == "notFound"
    # A region without routers lists none: Compute leaves the empty `items` out.
    listed = session.get(f"{project_api.base_url}/compute/v1/projects/{PROJECT}/regions/us-east1/routers",
                         timeout=5).json()
    assert listed["kind"] == "compute#routerList" and "items" not in listed


def test_cloud_quotas_rejects_an_unknown_query_parameter(project_api: GcpProjectSandbox,
                                                         session: AuthorizedSession) -> None:
    response = session.get(f"{project_api.base_url}/v1/projects/{PROJECT}/locations/global/services/"
                           "tpu.googleapis.com/quotaInfos", params={"filter": "zone"}, timeout=5)
    assert_google_400(response, "filter", "filter")


# --- what the bot really sends passes, and what the emulators answer conforms ------------------------

def test_the_bots_own_tpu_traffic_passes_and_every_response_conforms(tpu: TpuSandbox) -> None:
    with TpuService(TpuConfig(project=PROJECT, api_endpoint=tpu.base_url), credentials=AnonymousCredentials(),
                    lro_poll_interval=0.01) as service:
        spec = QrSpec("qr-a", "node-a", ZONE, bot_labels("T", "C", "L"), "#!/bin/bash\n",
                      max_run_duration=timedelta(hours=1))
        service.create_queued_resource(spec)
        service.list_queued_resources(ZONE)
        service.list_accelerator_types(ZONE)
        service.get_run_window(ZONE, "qr-a")
        tpu.fast_forward(1)
        assert service.get_node(ZONE, "node-a") is not None
        service.delete_queued_resource(ZONE, "qr-a")
    assert tpu.rejected == [] and tpu.response_problems == []
    checked = set(tpu.apis["v2"].checked) | set(tpu.apis["v2alpha1"].checked)
    assert {"tpu.projects.locations.queuedResources.create", "tpu.projects.locations.queuedResources.get",
            "tpu.projects.locations.queuedResources.list", "tpu.projects.locations.queuedResources.delete",
            "tpu.projects.locations.nodes.get", "tpu.projects.locations.acceleratorTypes.list",
            "tpu.projects.locations.operations.get"} <= checked


def test_the_typed_project_clients_pass_and_every_response_conforms(project_api: GcpProjectSandbox) -> None:
    options = {"api_endpoint": project_api.base_url}
    quotas = cloudquotas_v1.CloudQuotasClient(transport="rest", credentials=AnonymousCredentials(),
                                              client_options=options)
    name = f"projects/{PROJECT}/locations/global/services/tpu.googleapis.com/quotaInfos/{QUOTA}"
    assert quotas.get_quota_info(name=name).dimensions_infos[0].details.value == 8
    assert [q.quota_id for q in quotas.list_quota_infos(parent=name.rsplit("/", 2)[0])] == [QUOTA]
    secrets = secretmanager_v1.SecretManagerServiceClient(transport="rest", credentials=AnonymousCredentials(),
                                                          client_options=options)
    secret = secrets.create_secret(parent=f"projects/{PROJECT}", secret_id="k1",
                                   secret={"replication": {"automatic": {}}, "labels": {"managed-by": "tpubot"}})
    secrets.add_secret_version(parent=secret.name, payload={"data": b"key"})
    assert secrets.access_secret_version(name=f"{secret.name}/versions/latest").payload.data == b"key"
    secrets.delete_secret(name=secret.name)
    assert "k1" not in project_api.secrets
    with AuthorizedSession(AnonymousCredentials()) as session:
        rules = session.get(f"{project_api.base_url}/compute/v1/projects/{PROJECT}/global/firewalls", timeout=5)
    assert rules.status_code == 200 and rules.json()["items"][0]["targetTags"] == ["tpubot-model"]
    # Doctor's internal-egress and cache-bucket checks, as they call Compute and Storage.
    config = PreflightConfig(project=PROJECT, zone=ZONE, mode=DeploymentMode.SANDBOX, compute_endpoint=project_api.base_url,
                             storage_endpoint=project_api.base_url, endpoint_address="internal",
                             xla_cache_bucket="xla-cache")
    assert check_egress(config, AnonymousCredentials()).ok and check_cache_bucket(config, AnonymousCredentials()).ok
    assert {"compute.routers.list", "storage.buckets.get"} <= set(project_api.apis["compute"].checked) | set(
        project_api.apis["storage"].checked)
    assert project_api.rejected == [] and project_api.response_problems == []


def test_the_logging_clients_traffic_passes_and_every_response_conforms() -> None:
    with LoggingEmulator(PROJECT, generate_entries(PROJECT, 30)) as server:
        client = cloud_logging.Client(project=PROJECT, credentials=AnonymousCredentials(), _use_grpc=False,
                                      client_options={"api_endpoint": server.url})
        entries = list(client.list_entries(resource_names=[f"projects/{PROJECT}"], page_size=10, max_results=25,
                                           order_by=cloud_logging.DESCENDING))
        assert len(entries) == 25
        assert server.rejected == [] and server.response_problems == []


# --- guest attributes: what a booting VM tells the bot (issue 28) ------------------------------------

def _active_node(tpu: TpuSandbox, service: TpuService) -> str:
    service.create_queued_resource(QrSpec("qr-g", "node-g", ZONE, bot_labels("T", "C", "L"), "#!/bin/bash\n"))
    tpu.fast_forward(1)
    assert service.get_node(ZONE, "node-g") is not None
    return f"projects/{PROJECT}/locations/{ZONE}/nodes/node-g"


def test_get_guest_attributes_is_served_as_the_discovery_documents_shape_it(tpu: TpuSandbox,
                                                                             session: AuthorizedSession) -> None:
    from infra import boot_phases as bp

    with TpuService(TpuConfig(project=PROJECT, api_endpoint=tpu.base_url), credentials=AnonymousCredentials(),
                    lro_poll_interval=0.01) as service:
        node = _active_node(tpu, service)
        assert service.get_boot_report(ZONE, "node-g") == bp.BootReport()  # nothing published yet
        tpu.set_guest_attributes(ZONE, "node-g", bp.NAMESPACE, {
            bp.PHASE_KEY: bp.CRASHED, bp.PHASE_SINCE_KEY: "2026-12-02T14:03:11Z", bp.RESTARTS_KEY: "2",
            bp.LAST_ERROR_KEY: "AssertionError: Expect no shared layers", bp.CACHE_KEY: bp.CACHE_COLD})
        tpu.set_guest_attributes(ZONE, "node-g", "other-agent", {"phase": "not ours"})
        # Through the real google-cloud-tpu v2 client (TpuClient.get_guest_attributes, REST).
        report = service.get_boot_report(ZONE, "node-g")
        assert (report.phase, report.restarts, report.cache) == (bp.CRASHED, 2, bp.CACHE_COLD)
        assert report.last_error == "AssertionError: Expect no shared layers"
        assert report.since is not None and report.since.isoformat() == "2026-12-02T14:03:11+00:00"
        assert service.get_boot_report(ZONE, "node-gone") is None  # a missing node: 404, read as None

        # The raw wire, both versions: POST with a GetGuestAttributesRequest body; one entry per worker.
        for version in ("v2", "v2alpha1"):
            url = f"{tpu.base_url}/{version}/{node}:getGuestAttributes"
            answer = session.post(url, json={"queryPath": "tpubot/phase", "workerIds": ["0"]}, timeout=5)
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"guestAttributes": [{"queryPath": "tpubot/phase", "queryValue": {
                "items": [{"namespace": "tpubot", "key": "phase", "value": "crashed"}]}}]}
            everything = session.post(url, json={}, timeout=5).json()["guestAttributes"][0]["queryValue"]["items"]
            assert {item["namespace"] for item in everything} == {"tpubot", "other-agent"}
            # The request message has queryPath and workerIds (plural) and nothing else.
            refused = session.post(url, json={"queryPath": "tpubot/", "workerId": "0"}, timeout=5)
            assert_google_400(refused, "workerId", "workerId")
            assert session.post(url, json={"workerIds": "0"}, timeout=5).status_code == 400  # a list, not a string
            wrong_verb = session.get(url, timeout=5)  # the method is a POST
            assert wrong_verb.status_code == 400 and "Method GET is not supported" in wrong_verb.text
    assert tpu.response_problems == []
    checked = set(tpu.apis["v2"].checked) | set(tpu.apis["v2alpha1"].checked)
    assert "tpu.projects.locations.nodes.getGuestAttributes" in checked


def test_iam_service_accounts_are_served_as_iam_v1_describes_them(project_api: GcpProjectSandbox) -> None:
    """create, get, getIamPolicy and setIamPolicy of projects.serviceAccounts: paths, bodies, errors and
    permissions as Google's IAM answers them, each request and response checked against iam.v1."""
    base = f"{project_api.base_url}/v1/projects/{PROJECT}/serviceAccounts"
    email = f"tpubot-node@{PROJECT}.iam.gserviceaccount.com"
    iam = project_api.iam
    iam.grant(f"projects/{PROJECT}", "roles/iam.serviceAccountAdmin", "user:admin@example.com")
    admin = {"Authorization": f"Bearer {iam.mint('user:admin@example.com')}"}
    with AuthorizedSession(AnonymousCredentials()) as bot:  # no token: the bot, whose roles do not create accounts
        refused = bot.post(base, json={"accountId": "tpubot-node"}, timeout=5)
        assert refused.status_code == 403 and refused.json()["error"]["status"] == "PERMISSION_DENIED"
        assert "Permission 'iam.serviceAccounts.create' denied" in refused.json()["error"]["message"]
        assert not iam.account_exists(email)
        created = bot.post(base, json={"accountId": "tpubot-node", "serviceAccount": {"displayName": "tpubot VMs"}},
                           headers=admin, timeout=5)
        assert created.status_code == 200, created.text
        assert created.json() | {"uniqueId": "", "oauth2ClientId": "", "etag": ""} == {
            "name": f"projects/{PROJECT}/serviceAccounts/{email}", "projectId": PROJECT, "email": email,
            "displayName": "tpubot VMs", "uniqueId": "", "oauth2ClientId": "", "etag": ""}
        assert iam.account_exists(email)
        again = bot.post(base, json={"accountId": "tpubot-node"}, headers=admin, timeout=5)
        assert again.status_code == 409 and again.json()["error"]["status"] == "ALREADY_EXISTS"
        assert again.json()["error"]["message"] == (
            f"Service account tpubot-node already exists within project projects/{PROJECT}.")
        assert isinstance(gexc.from_http_response(again), gexc.Conflict)
        short = bot.post(base, json={"accountId": "node"}, headers=admin, timeout=5)
        assert short.status_code == 400 and "6-30 characters" in short.json()["error"]["message"]
        assert not iam.account_exists(f"node@{PROJECT}.iam.gserviceaccount.com")
        unknown_field = bot.post(base, json={"accountId": "tpubot-other", "serviceAccount": {"keyAlgorithm": "x"}},
                                 headers=admin, timeout=5)
        assert unknown_field.status_code == 400 and '"keyAlgorithm"' in unknown_field.json()["error"]["message"]
        # get, by project id or the `-` wildcard; an account nobody created is IAM's 404.
        wildcard = f"{project_api.base_url}/v1/projects/-/serviceAccounts"
        assert bot.get(f"{wildcard}/{email}", headers=admin, timeout=5).json()["email"] == email
        missing = bot.get(f"{base}/nobody-here@{PROJECT}.iam.gserviceaccount.com", headers=admin, timeout=5)
        assert missing.status_code == 404 and missing.json()["error"]["message"] == "Unknown service account"
        # The account's own policy: the admin lets the bot act as it; the bot may not change it itself.
        policy = bot.post(f"{base}/{email}:getIamPolicy", params={"options.requestedPolicyVersion": 3},
                          headers=admin, timeout=5)
        assert policy.status_code == 200 and "bindings" not in policy.json()
        resource = iam.account_resource(email)
        assert not iam.allows("bot", "iam.serviceAccounts.actAs", resource)
        grant = {"policy": {"bindings": [{"role": "roles/iam.serviceAccountUser",
                                          "members": [f"serviceAccount:{iam.bot_account}"]}],
                            "etag": policy.json()["etag"]}}
        assert bot.post(f"{base}/{email}:setIamPolicy", json=grant, timeout=5).status_code == 403
        assert not iam.allows("bot", "iam.serviceAccounts.actAs", resource)
        granted = bot.post(f"{base}/{email}:setIamPolicy", json=grant, headers=admin, timeout=5)
        assert granted.status_code == 200, granted.text
        assert iam.allows("bot", "iam.serviceAccounts.actAs", resource)
        stale = bot.post(f"{base}/{email}:setIamPolicy", json=grant, headers=admin, timeout=5)
        assert stale.status_code == 409 and stale.json()["error"]["status"] == "ABORTED"  # the etag moved on
    assert {"iam.projects.serviceAccounts.create", "iam.projects.serviceAccounts.get",
            "iam.projects.serviceAccounts.getIamPolicy", "iam.projects.serviceAccounts.setIamPolicy"} <= set(
        project_api.apis["iam"].checked)
    assert project_api.response_problems == []
    assert [r.message for r in project_api.rejected] == [unknown_field.json()["error"]["message"]]


def test_a_service_accounts_test_iam_permissions_answers_what_the_caller_holds_on_it(
        project_api: GcpProjectSandbox) -> None:
    """iam.projects.serviceAccounts.testIamPermissions, what doctor asks before any `/tpu up` with
    TPU_SERVICE_ACCOUNT: anyone may ask; the answer is the subset of the asked permissions the caller holds on
    the account (its own policy, or the project's), an empty message when none, and none for an account that
    does not exist. Each request and response is checked against iam.v1."""
    email = f"tpubot-node@{PROJECT}.iam.gserviceaccount.com"
    iam = project_api.iam
    iam.add_account(email)
    url = f"{project_api.base_url}/v1/projects/-/serviceAccounts/{email}:testIamPermissions"
    asked = {"permissions": ["iam.serviceAccounts.actAs", "iam.serviceAccounts.get"]}
    admin = {"Authorization": f"Bearer {iam.mint('user:admin@example.com')}"}
    with AuthorizedSession(AnonymousCredentials()) as bot:  # no token: the bot
        nothing = bot.post(url, json=asked, timeout=5)
        assert nothing.status_code == 200 and nothing.json() == {}
        iam.grant(iam.account_resource(email), "roles/iam.serviceAccountUser", iam.bot_account)
        assert bot.post(url, json=asked, timeout=5).json() == {"permissions": ["iam.serviceAccounts.actAs"]}
        # A grant on the project counts on its accounts; the project's id names the account as well as `-`.
        iam.grant(f"projects/{PROJECT}", "roles/iam.serviceAccountAdmin", "user:admin@example.com")
        by_id = url.replace("/projects/-/", f"/projects/{PROJECT}/")
        assert bot.post(by_id, json=asked, headers=admin, timeout=5).json() == {
            "permissions": ["iam.serviceAccounts.get"]}
        missing = url.replace("tpubot-node@", "nobody-here@")
        assert bot.post(missing, json=asked, headers=admin, timeout=5).json() == {}
        wildcard = bot.post(url, json={"permissions": ["iam.serviceAccounts.*"]}, timeout=5)
        assert wildcard.status_code == 400 and "iam.serviceAccounts.*" in wildcard.json()["error"]["message"]
        assert_google_400(bot.post(url, json={"permission": ["iam.serviceAccounts.actAs"]}, timeout=5),
                          "permission", "permission")
    assert "iam.projects.serviceAccounts.testIamPermissions" in project_api.apis["iam"].checked
    assert project_api.response_problems == []
