"""`tpubot doctor`: every check against the sandbox's emulated APIs; the verdict gates `/tpu up`."""

from __future__ import annotations

import asyncio
import os
import re
import logging

import pytest
from typer.testing import CliRunner

from bot.cli import app
from bot.settings import Settings

CHECKS = ("settings", "credentials", "project", "network", "model firewall", "hf token secret", "tpu quota",
          "tpu vm account")


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TPUBOT_ENV_FILE", os.devnull)  # no tpu.env: a named file that is missing is an error
    for name in ("GCP_PROJECT", "REDIS_URL", "HF_TOKEN_SECRET", "NETWORK", "SUBNETWORK", "TPU_ZONE", "ENDPOINT_ADDRESS",
                 "XLA_CACHE_BUCKET", "VLLM_IMAGE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def doctor():
    return CliRunner().invoke(app, ["doctor"])


def test_doctor_passes_on_embedded_defaults(env, caplog):
    caplog.set_level(logging.DEBUG)
    result = doctor()
    assert result.exit_code == 0, result.output
    for name in CHECKS:
        assert f"PASS  {name}" in result.output
    assert "FAIL" not in result.output and "all checks passed" in result.output
    assert "hf_sandbox" not in result.output + caplog.text  # the secret was read, never shown
    # External nodes need no NAT check, and no bucket is checked when XLA_CACHE_BUCKET is unset.
    assert "internal egress" not in result.output and "xla cache bucket" not in result.output


def test_doctor_fails_with_the_fix_when_the_secret_is_missing(env):
    env.setenv("HF_TOKEN_SECRET", "gemma-hf-token")
    result = doctor()
    assert result.exit_code != 0
    line = next(out for out in result.output.splitlines() if out.startswith("FAIL"))
    assert "hf token secret" in line and "gemma-hf-token" in line
    assert "gcloud secrets create gemma-hf-token" in result.output
    assert "PASS  network" in result.output and "1 check failed" in result.output


def test_doctor_names_a_missing_network_and_zero_quota(env):
    env.setenv("NETWORK", "prod-vpc")
    env.setenv("TPU_ZONE", "us-east5-a")  # not in the sandbox: no quota there
    result = doctor()
    assert result.exit_code == 1
    assert "FAIL  network          network 'prod-vpc' does not exist" in result.output
    assert "set NETWORK to an existing VPC network" in result.output
    assert "FAIL  tpu quota" in result.output


def test_failed_verdict_is_cached_and_up_explains_it_instead_of_searching(env, redis_url, make_bot):
    env.setenv("REDIS_URL", redis_url)
    env.setenv("HF_TOKEN_SECRET", "gemma-hf-token")
    assert doctor().exit_code == 1
    bot = make_bot()
    slack = bot.signed_requests()
    reply = slack.slash("up", user="UALICE", channel="C0DOC")
    assert reply.text.startswith(":stop_sign:") and "tpubot doctor" in reply.text and "hf token secret" in reply.text
    assert "gcloud secrets create gemma-hf-token" in reply.text
    assert "holds no TPU" in slack.slash("status", user="UALICE", channel="C0DOC").text
    assert bot.tpu_sandbox.create_attempts == []
    slack.close()


# --- issue 15: the model firewall, denied permissions, sandbox endpoints, no cross-endpoint verdicts ----

from infra.preflight import PreflightConfig, PreflightGate, PreflightStore  # noqa: E402
from infra.sandbox.world import CloudSandbox, SandboxWorld  # noqa: E402


@pytest.fixture
def own_cloud(env):
    """Runs a sandbox world the test shapes, and points every endpoint setting at it (as `tpubot sandbox` says)."""
    started = []

    def start(**world) -> CloudSandbox:
        cloud = CloudSandbox(SandboxWorld(**world)).start()
        started.append(cloud)
        for key, value in cloud.endpoint_overrides().items():
            env.setenv(key.upper(), value)
        return cloud

    yield start
    for cloud in started:
        cloud.stop()


def test_missing_firewall_rule_prints_the_gcloud_fix(own_cloud, env):
    cloud = own_cloud(firewalls=())
    env.setenv("MODEL_SOURCE_RANGES", "203.0.113.7")
    result = doctor()
    assert result.exit_code == 1, result.output
    assert ("FAIL  model firewall   no firewall rule on network default admits 203.0.113.7/32 to tag tpubot-model "
            "on tcp:8000") in result.output
    assert ("gcloud compute firewall-rules create tpubot-model --project=tpubot-sandbox --network=default "
            "--direction=INGRESS --action=ALLOW --rules=tcp:8000 --source-ranges=203.0.113.7/32 "
            "--target-tags=tpubot-model") in result.output
    assert "1 check failed" in result.output
    # The sandbox that was configured is the one asked (no second, embedded sandbox started).
    assert "started here" not in result.output
    assert any(path.endswith("/global/firewalls") for _, path, _ in cloud.project_api.requests)


def test_a_rule_for_other_sources_or_another_port_does_not_count(own_cloud, env):
    rule = {"name": "office", "network": "default", "sourceRanges": ["198.51.100.0/24"],
            "allowed": [{"IPProtocol": "tcp", "ports": ["22", "8000-8001"]}], "targetTags": ["tpubot-model"]}
    own_cloud(firewalls=(rule,))
    env.setenv("MODEL_SOURCE_RANGES", "198.51.100.7/32")
    assert "PASS  model firewall   rule office admits 198.51.100.7/32" in doctor().output
    env.setenv("MODEL_SOURCE_RANGES", "203.0.113.7/32")
    assert "FAIL  model firewall" in doctor().output
    env.setenv("MODEL_SOURCE_RANGES", "198.51.100.7/32")
    env.setenv("MODEL_PORT", "9000")
    assert "FAIL  model firewall" in doctor().output


def test_denied_quota_and_secret_name_the_missing_role(own_cloud):
    own_cloud(denied=("cloudquotas.quotas.get", "secretmanager.versions.access"))
    result = doctor()
    assert result.exit_code == 1
    lines = result.output.splitlines()
    quota = lines.index(next(line for line in lines if line.startswith("FAIL  tpu quota")))
    secret = lines.index(next(line for line in lines if line.startswith("FAIL  hf token secret")))
    assert "Permission 'cloudquotas.quotas.get' denied" in lines[quota]
    assert "roles/cloudquotas.viewer" in lines[quota + 1] and "enable" not in lines[quota + 1]
    assert "Permission 'secretmanager.versions.access' denied" in lines[secret]
    assert "roles/secretmanager.secretAccessor" in lines[secret + 1] and "enable" not in lines[secret + 1]


def test_a_half_configured_sandbox_never_asks_google(own_cloud, env):
    cloud = own_cloud()
    for name in ("COMPUTE_API_ENDPOINT", "QUOTAS_API_ENDPOINT", "SECRETMANAGER_API_ENDPOINT", "STORAGE_API_ENDPOINT"):
        env.delenv(name)  # only TPU_API_ENDPOINT points at the running sandbox
    result = doctor()
    assert result.exit_code == 0, result.output
    assert ("COMPUTE_API_ENDPOINT, QUOTAS_API_ENDPOINT, SECRETMANAGER_API_ENDPOINT, STORAGE_API_ENDPOINT started "
            "here") in result.output
    assert any("/acceleratorTypes" in r.path for r in cloud.tpu.requests)  # the configured TPU API was asked


def test_no_verdict_is_shared_across_endpoint_sets(own_cloud, env, redis_url):
    own_cloud(firewalls=())
    env.setenv("REDIS_URL", redis_url)
    result = doctor()
    assert result.exit_code == 1, result.output  # cached under the local endpoint set
    assert "not cached" not in result.output and "could not cache" not in result.output, result.output
    from bot.wiring import preflight_config_from, redis_client

    settings = Settings.load()
    local = preflight_config_from(settings)
    google = PreflightConfig(project=local.project, zone=local.zone, mode=local.mode,
                             model_source_ranges=local.model_source_ranges)
    other_local = preflight_config_from(settings.model_copy(update={"tpu_api_endpoint": "http://127.0.0.1:1"}))
    async def failures(fingerprint: str) -> list[str]:
        redis = redis_client(redis_url)
        try:
            return [c.name for c in await PreflightGate(PreflightStore(redis), fingerprint).failures()]
        finally:
            await redis.aclose()

    assert asyncio.run(failures(local.fingerprint())) == ["model firewall"]
    assert other_local.fingerprint() == local.fingerprint()  # an emulator's port moves every run
    assert asyncio.run(failures(google.fingerprint())) == []  # a verdict about the local emulators is not Google's


# --- issue 28: internal nodes need a way out; the XLA cache bucket must be in the TPU's region ----------

MIRROR = "us-west4-docker.pkg.dev/tpubot-sandbox/mirror/vllm-tpu:v0.32.0"


def nat_router(region: str = "us-west4", network: str = "default", **nat) -> dict:
    return {"name": f"nat-router-{region}", "region": region, "network": network,
            "nats": [{"name": "egress", "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES",
                      "natIpAllocateOption": "AUTO_ONLY", **nat}]}


def check_line(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line[6:].startswith(name))


def test_internal_nodes_need_cloud_nat_for_the_weights_and_a_docker_hub_image_is_a_warning(own_cloud, env):
    env.setenv("ENDPOINT_ADDRESS", "internal")
    env.setenv("VLLM_IMAGE", MIRROR)
    cloud = own_cloud(routers=(nat_router(),))
    result = doctor()
    assert result.exit_code == 0, result.output
    assert check_line(result.output, "internal egress") == (
        "PASS  internal egress  Cloud NAT egress on router nat-router-us-west4 serves network default in us-west4")
    assert check_line(result.output, "private google access") == (
        "PASS  private google access subnetwork default in us-west4 has Private Google Access")
    assert any(path == "/compute/v1/projects/tpubot-sandbox/regions/us-west4/routers"
               for _, path, _ in cloud.project_api.requests)
    assert cloud.project_api.rejected == [] and cloud.project_api.response_problems == []

    # The NAT serves Docker Hub too, but every node pulls through its one address: a warning, with the mirror.
    env.delenv("VLLM_IMAGE")
    result = doctor()
    assert result.exit_code == 0, result.output
    line = check_line(result.output, "internal egress")
    assert line.startswith("WARN  internal egress") and "is on Docker Hub: it allows 10 anonymous pulls" in line
    assert ("gcloud artifacts repositories create vllm --repository-format=docker --location=us-west4 "
            "--project=tpubot-sandbox") in result.output
    assert "VLLM_IMAGE=us-west4-docker.pkg.dev/tpubot-sandbox/vllm/vllm-tpu:v0.32.0" in result.output

    # A NAT of another region, or of another network, is no way out for this node.
    own_cloud(routers=(nat_router("us-east1"), nat_router(network="other-vpc")))
    result = doctor()
    assert result.exit_code == 1, result.output
    assert check_line(result.output, "internal egress").startswith(
        "FAIL  internal egress  ENDPOINT_ADDRESS=internal, but network default has no Cloud NAT in us-west4: "
        "neither the image nor the weights can be pulled")
    assert ("gcloud compute routers create tpubot-nat-router --project=tpubot-sandbox --network=default "
            "--region=us-west4 && gcloud compute routers nats create tpubot-nat --project=tpubot-sandbox "
            "--router=tpubot-nat-router --region=us-west4 --auto-allocate-nat-external-ips "
            "--nat-all-subnet-ip-ranges") in result.output
    assert "1 check failed" in result.output

    # An image mirrored in the TPU's region is pulled without a NAT, but the weights come from Hugging Face.
    env.setenv("VLLM_IMAGE", MIRROR)
    assert check_line(doctor().output, "internal egress").startswith(
        "FAIL  internal egress  ENDPOINT_ADDRESS=internal, but network default has no Cloud NAT in us-west4: "
        "VLLM_IMAGE is in Artifact Registry in us-west4, but the weights come from Hugging Face")


def test_internal_nodes_need_private_google_access_to_reach_their_secrets(own_cloud, env):
    env.setenv("ENDPOINT_ADDRESS", "internal")
    env.setenv("VLLM_IMAGE", MIRROR)
    own_cloud(routers=(nat_router(),), private_google_access=False)
    result = doctor()
    assert result.exit_code == 1, result.output
    assert check_line(result.output, "private google access").startswith(
        "FAIL  private google access subnetwork default in us-west4 has Private Google Access off: a node without an "
        "external IP cannot reach Secret Manager")
    assert ("gcloud compute networks subnets update default --project=tpubot-sandbox --region=us-west4 "
            "--enable-private-ip-google-access") in result.output
    # External nodes are not asked: they reach Google's APIs through their external IP.
    env.setenv("ENDPOINT_ADDRESS", "external")
    assert "private google access" not in doctor().output


def test_doctor_names_the_account_the_tpu_vm_runs_as_and_whether_it_reads_the_hf_token(own_cloud, env):
    from infra.sandbox.iam import default_compute_account

    node = default_compute_account(123456789012)
    cloud = own_cloud()
    result = doctor()
    assert result.exit_code == 0, result.output
    assert check_line(result.output, "tpu vm account") == (
        f"PASS  tpu vm account   the TPU VMs run as {node} (the project's default Compute Engine service account) "
        "and may read hf-token (roles/secretmanager.secretAccessor on the secret)")
    # The account is found from the project's number (Resource Manager), as the bot finds it.
    assert ("GET", "/v1/projects/tpubot-sandbox", "tpubot@tpubot-sandbox.iam.gserviceaccount.com") in \
        cloud.project_api.requests

    # Without the README's grant the VM would give up at boot. Without roles/browser the bot cannot see a
    # grant on the project: a warning with the command; with it, a failure with the command.
    own_cloud(iam_grants=(("project", "roles/editor", f"serviceAccount:{node}"),))
    result = doctor()
    assert result.exit_code == 0, result.output
    assert check_line(result.output, "tpu vm account").startswith(f"WARN  tpu vm account   the TPU VMs run as {node}")
    assert "grant the bot roles/browser to check it" in result.output
    own_cloud(iam_grants=(("project", "roles/editor", f"serviceAccount:{node}"),
                          ("project", "roles/browser", "serviceAccount:tpubot@tpubot-sandbox.iam.gserviceaccount.com")))
    result = doctor()
    assert result.exit_code == 1, result.output
    assert check_line(result.output, "tpu vm account").startswith(
        f"FAIL  tpu vm account   the TPU VMs run as {node} (the project's default Compute Engine service account), "
        "which may not read hf-token: no role that reads secrets is bound to it")
    assert (f"gcloud secrets add-iam-policy-binding hf-token --project tpubot-sandbox --member serviceAccount:{node} "
            "--role roles/secretmanager.secretAccessor") in result.output
    # A dedicated account (TPU_SERVICE_ACCOUNT) is the one checked, granted on the project this time.
    own_cloud(iam_grants=(("project", "roles/secretmanager.secretAccessor",
                           "serviceAccount:tpubot-node@tpubot-sandbox.iam.gserviceaccount.com"),
                          ("project", "roles/browser", "serviceAccount:tpubot@tpubot-sandbox.iam.gserviceaccount.com")))
    env.setenv("TPU_SERVICE_ACCOUNT", "tpubot-node@tpubot-sandbox.iam.gserviceaccount.com")
    assert check_line(doctor().output, "tpu vm account") == (
        "PASS  tpu vm account   the TPU VMs run as tpubot-node@tpubot-sandbox.iam.gserviceaccount.com "
        "(TPU_SERVICE_ACCOUNT) and may read hf-token (roles/secretmanager.secretAccessor on the project)")


def test_doctor_warns_not_fails_when_it_cannot_tell_whether_the_tpu_vms_account_reads_the_hf_token(own_cloud, env):
    """A grant the bot cannot see may exist: "cannot tell" is a warning with the grant command, never a failure
    that would stop every `/tpu up` of a working project."""
    from infra.sandbox.iam import default_compute_account

    node, bot = default_compute_account(123456789012), "serviceAccount:tpubot@tpubot-sandbox.iam.gserviceaccount.com"
    grant = (f"gcloud secrets add-iam-policy-binding hf-token --project tpubot-sandbox --member serviceAccount:{node} "
             "--role roles/secretmanager.secretAccessor")
    seen = (("project", "roles/browser", bot),)  # the bot may read the project's policy: "no grant" is decidable

    def verdict(exit_code: int = 0, **world) -> str:
        own_cloud(**world)
        result = doctor()
        assert result.exit_code == exit_code, result.output
        line = check_line(result.output, "tpu vm account")
        assert line.startswith(f"WARN  tpu vm account   the TPU VMs run as {node}") or line.startswith(
            "WARN  tpu vm account   could not tell"), line
        return result.output

    # The project sits in a folder (or an organization): a grant there does not show in the project's policy.
    out = verdict(iam_grants=seen, parent="folders/4242")
    assert "no grant on the secret or the project; project tpubot-sandbox is in folder 4242, where a grant would " \
           "not show here" in out and grant in out
    assert "project tpubot-sandbox is in organization 77" in verdict(iam_grants=seen, parent="organizations/77")
    # A group holds the role: the account may be a member, which the bot cannot see.
    out = verdict(iam_grants=(*seen, ("secret:hf-token", "roles/secretmanager.secretAccessor",
                                      "group:tpu-nodes@example.com")))
    assert "but group:tpu-nodes@example.com (roles/secretmanager.secretAccessor) holds one on the secret" in out
    # A custom role is bound to the account: what it holds was not checked.
    role = "projects/tpubot-sandbox/roles/tpubotNode"
    out = verdict(iam_grants=(*seen, ("project", role, f"serviceAccount:{node}")),
                  custom_roles={role: ("secretmanager.versions.access", "logging.logEntries.create")})
    assert f"but the custom role {role} is, on the project" in out
    # The project's number cannot be read (the bot lacks resourcemanager.projects.get): which account is unknown.
    # The bot permissions check is the one that fails, naming the permission.
    out = verdict(1, denied=("resourcemanager.projects.get",))
    assert check_line(out, "bot permissions").startswith("FAIL  bot permissions  the bot's account lacks "
                                                         "resourcemanager.projects.get")
    assert check_line(out, "tpu vm account").startswith(
        "WARN  tpu vm account   could not tell which account the TPU VMs run as: Cloud Resource Manager refused "
        "project tpubot-sandbox's number (HTTP 403")
    assert "or set TPU_SERVICE_ACCOUNT to the account the TPU VMs run as" in out
    # Nothing hidden and no grant: still a failure.
    result = (own_cloud(iam_grants=seen), doctor())[1]
    assert result.exit_code == 1 and check_line(result.output, "tpu vm account").startswith("FAIL  tpu vm account")


KEY_ROLE = "projects/tpubot-sandbox/roles/tpubotKeys"


def readme_bot_secret_permissions() -> list[str]:
    """The permissions of the custom role the README offers the bot instead of roles/secretmanager.admin."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `roles/secretmanager.admin`, or a custom role"))
    return re.findall(r"`(secretmanager\.[a-zA-Z.]+)`", row.split("|")[1])


def test_the_readmes_custom_role_for_the_bot_is_what_the_code_needs():
    from infra.model_keys import BOT_SECRET_PERMISSIONS

    assert sorted(readme_bot_secret_permissions()) == sorted(BOT_SECRET_PERMISSIONS)


def test_doctor_asks_google_which_secret_manager_permissions_the_bot_holds_and_names_the_missing(own_cloud, env):
    from infra.model_keys import BOT_SECRET_PERMISSIONS
    from infra.sandbox.iam import BOT_ROLES

    narrowed = tuple(r for r in BOT_ROLES if r != "roles/secretmanager.admin") + (KEY_ROLE,)
    cloud = own_cloud(bot_roles=narrowed, custom_roles={KEY_ROLE: tuple(readme_bot_secret_permissions())})
    result = doctor()
    assert result.exit_code == 0, result.output
    assert check_line(result.output, "bot permissions") == (
        f"PASS  bot permissions  the bot's account holds the {len(BOT_SECRET_PERMISSIONS)} Secret Manager permissions "
        "of the lease's key and resourcemanager.projects.get")
    assert ("POST", "/v1/projects/tpubot-sandbox:testIamPermissions", "tpubot@tpubot-sandbox.iam.gserviceaccount.com") \
        in cloud.project_api.requests
    assert "cloudresourcemanager.projects.testIamPermissions" in cloud.project_api.apis["resourcemanager"].checked
    assert cloud.project_api.rejected == [] and cloud.project_api.response_problems == []
    # Asked, not tried: no secret was created or deleted to find out.
    assert not any(m in ("POST", "DELETE") and "/secrets" in path and "hf-token" not in path
                   for m, path, _ in cloud.project_api.requests)

    # A custom role that forgot setIamPolicy, and a bot without tpu.admin's resourcemanager.projects.get.
    own_cloud(bot_roles=narrowed, custom_roles={KEY_ROLE: tuple(p for p in readme_bot_secret_permissions()
                                                               if p != "secretmanager.secrets.setIamPolicy")},
              denied=("resourcemanager.projects.get",))
    result = doctor()
    assert result.exit_code == 1, result.output
    assert check_line(result.output, "bot permissions") == (
        "FAIL  bot permissions  the bot's account lacks secretmanager.secrets.setIamPolicy, "
        "resourcemanager.projects.get on project tpubot-sandbox: `/tpu up` would fail before any TPU")
    assert ("grant the bot's account roles/secretmanager.admin (the one predefined role that creates, deletes and sets "
            "the IAM policy of secrets), or add them to the bot's custom role and roles/tpu.admin (it holds "
            "resourcemanager.projects.get) on the project") in " ".join(result.output.split())


def test_the_xla_cache_bucket_must_exist_in_the_tpus_region(own_cloud, env):
    cloud = own_cloud(buckets={"cache-w4": "US-WEST4", "cache-eu": "EUROPE-WEST4", "cache-us": "US"})
    env.setenv("XLA_CACHE_BUCKET", "gs://no-such-cache")
    result = doctor()
    assert result.exit_code == 1, result.output
    assert check_line(result.output, "xla cache bucket") == (
        "FAIL  xla cache bucket bucket no-such-cache (XLA_CACHE_BUCKET) does not exist")
    assert ("gcloud storage buckets create gs://no-such-cache --project=tpubot-sandbox --location=us-west4 "
            "--uniform-bucket-level-access") in result.output
    assert any(path == "/storage/v1/b/no-such-cache" for _, path, _ in cloud.project_api.requests)

    env.setenv("XLA_CACHE_BUCKET", "cache-eu")
    result = doctor()
    assert result.exit_code == 1, result.output
    assert check_line(result.output, "xla cache bucket") == (
        "FAIL  xla cache bucket bucket cache-eu is in EUROPE-WEST4, but the TPU is in us-west4 (zone us-west4-a): "
        "every cache restore would cross regions")

    env.setenv("XLA_CACHE_BUCKET", "cache-us")  # a multi-region that contains us-west4: works, but warned
    result = doctor()
    assert result.exit_code == 0, result.output
    assert check_line(result.output, "xla cache bucket").startswith(
        "WARN  xla cache bucket bucket cache-us is in US (multi-region), which contains the TPU's region us-west4")
    assert "all checks passed, 1 with a warning" in result.output

    env.setenv("XLA_CACHE_BUCKET", "cache-w4")
    result = doctor()
    assert result.exit_code == 0, result.output
    assert check_line(result.output, "xla cache bucket") == (
        "PASS  xla cache bucket bucket cache-w4 is in US-WEST4, the TPU's region")
    assert cloud.project_api.rejected == [] and cloud.project_api.response_problems == []


def test_doctor_json_carries_the_nat_and_bucket_verdicts_with_their_fixes(own_cloud, env):
    import json

    own_cloud(buckets={"cache-us": "US"})
    env.setenv("ENDPOINT_ADDRESS", "internal")
    env.setenv("XLA_CACHE_BUCKET", "cache-us")
    result = CliRunner().invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    checks = {check["name"]: check for check in document["checks"]}
    assert document["ok"] is False
    egress, bucket = checks["internal egress"], checks["xla cache bucket"]
    assert checks["private google access"]["ok"] is True
    assert (egress["ok"], egress["warning"]) == (False, False)
    assert "gcloud compute routers nats create tpubot-nat" in egress["fix"]
    assert (bucket["ok"], bucket["warning"]) == (True, True)
    assert "US" in bucket["detail"] and "us-west4" in bucket["detail"]
    assert "--location=us-west4" in bucket["fix"]
    assert all(check["warning"] is False for name, check in checks.items() if name != "xla cache bucket")


@pytest.mark.parametrize("bucket, region, where", [
    ({"location": "US-WEST4", "locationType": "region"}, "us-west4", "IN_REGION"),
    ({"location": "US", "locationType": "multi-region"}, "us-west4", "SPANS_REGION"),
    ({"location": "EU", "locationType": "multi-region"}, "europe-west4", "SPANS_REGION"),
    ({"location": "EU", "locationType": "multi-region"}, "europe-west2", "ELSEWHERE"),  # London is not in the EU
    ({"location": "NAM4", "locationType": "dual-region"}, "us-central1", "SPANS_REGION"),
    ({"location": "NAM4", "locationType": "dual-region"}, "us-west4", "ELSEWHERE"),
    ({"location": "US", "locationType": "dual-region",
      "customPlacementConfig": {"dataLocations": ["US-EAST1", "US-WEST4"]}}, "us-west4", "SPANS_REGION"),
    ({"location": "US", "locationType": "dual-region",
      "customPlacementConfig": {"dataLocations": ["US-EAST1", "US-CENTRAL1"]}}, "us-west4", "ELSEWHERE"),
    ({"location": "EUROPE-WEST4", "locationType": "region"}, "us-west4", "ELSEWHERE"),
])
def test_where_a_bucket_keeps_its_data_relative_to_the_tpus_region(bucket, region, where):
    from infra.gcs_location import Placement, placement

    assert placement(bucket, region) is Placement[where]


def test_a_closed_tpu_endpoint_is_named_as_unreachable_not_as_a_refusing_project(env):
    from bot.local_stack import free_port

    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env.setenv("TPU_API_ENDPOINT", closed)
    result = doctor()
    assert result.exit_code == 1
    assert f"FAIL  project          cannot reach the TPU API at {closed} ([Errno 111] Connection refused)" in result.output
    assert "refused project" not in result.output and "gcloud services enable" not in result.output
    assert "tpubot sandbox" in result.output and "1 check failed" in result.output


@pytest.mark.e2e
def test_without_credentials_the_fix_is_given_once_not_under_every_check(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from bot.local_stack import free_port

    closed = f"http://127.0.0.1:{free_port()}"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GCP_", "GOOGLE_", "TPU_", "REDIS_URL"))}
    environ.update({"GCP_PROJECT": "my-project", "TPUBOT_ENV_FILE": os.devnull, "NO_GCE_CHECK": "true",
                    "CLOUDSDK_CONFIG": str(tmp_path / "no-gcloud"), "TPU_API_ENDPOINT": closed,
                    **{f"{api}_API_ENDPOINT": closed for api in ("COMPUTE", "QUOTAS", "SECRETMANAGER", "STORAGE")}})
    result = subprocess.run([str(Path(sys.executable).with_name("tpubot")), "doctor"], env=environ, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "FAIL  credentials" in result.stdout
    assert result.stdout.count("gcloud auth application-default login") == 1, result.stdout
    # with issue 40's TPU VM account and bot permissions checks
    assert result.stdout.count("SKIP  ") == result.stdout.count("not checked: it needs the credentials above to work") == 7
    # One problem, said once: the skipped checks are not counted as failures of their own (newcomer walk).
    assert "\n1 check failed, 7 not checked\n" in result.stdout, result.stdout[-400:]


# --- TPU_SERVICE_ACCOUNT: may the bot act as it? (Google refuses the create otherwise) -------------------

def test_doctor_passes_the_act_as_check_after_the_readmes_dedicated_block_word_for_word(own_cloud, env, tmp_path):
    from test_first_boot import DEDICATED, OPERATOR, _run_readme_block

    cloud = own_cloud(iam_grants=(("project", "roles/owner", OPERATOR),))  # hf-token exists, readable by none
    api = cloud.project_api
    ran = _run_readme_block(api, tmp_path, "A dedicated account instead", BOT_SA=api.iam.bot_account)
    assert ran.returncode == 0, ran.stderr
    env.setenv("TPU_SERVICE_ACCOUNT", ran.stdout.splitlines()[-1].removeprefix("TPU_SERVICE_ACCOUNT="))
    result = doctor()
    assert result.exit_code == 0, result.output
    assert check_line(result.output, "tpu vm actAs") == (
        f"PASS  tpu vm actAs     the bot's account may act as {DEDICATED} (TPU_SERVICE_ACCOUNT)")
    assert ("POST", f"/v1/projects/-/serviceAccounts/{DEDICATED}:testIamPermissions", api.iam.bot_account) in \
        api.requests
    assert "iam.projects.serviceAccounts.testIamPermissions" in api.apis["iam"].checked
    assert api.rejected == [] and api.response_problems == []


def test_doctor_fails_with_the_readmes_last_grant_when_the_bot_may_not_act_as_the_account(own_cloud, env):
    from test_first_boot import DEDICATED, _readme_block

    node = f"serviceAccount:{DEDICATED}"
    own_cloud(iam_grants=(("secret:hf-token", "roles/secretmanager.secretAccessor", node),
                          ("project", "roles/logging.logWriter", node)))  # the dedicated block but its last grant
    env.setenv("TPU_SERVICE_ACCOUNT", DEDICATED)
    result = doctor()
    assert result.exit_code == 1, result.output
    assert check_line(result.output, "tpu vm actAs") == (
        f"FAIL  tpu vm actAs     the bot's account may not act as {DEDICATED} (TPU_SERVICE_ACCOUNT: "
        "iam.serviceAccounts.actAs), or no such account exists: Google would refuse every `/tpu up`")
    # The fix is the README's grant, with its $BOT_SA: the sandbox bot's credentials carry no email.
    block = " ".join(_readme_block("A dedicated account instead").replace("\\\n", " ").replace('"', "").split())
    grant = block[block.index("gcloud iam service-accounts add-iam-policy-binding"):].split(" echo ")[0]
    grant = grant.replace("$NODE_SA", DEDICATED).replace("$PROJECT", "tpubot-sandbox")
    assert grant.endswith("--member serviceAccount:$BOT_SA --role roles/iam.serviceAccountUser"), grant
    assert grant in " ".join(result.output.split())
    assert "1 check failed" in result.output
    # An account nobody created is refused alike.
    env.setenv("TPU_SERVICE_ACCOUNT", "nobody-here@tpubot-sandbox.iam.gserviceaccount.com")
    assert check_line(doctor().output, "tpu vm actAs").startswith(
        "FAIL  tpu vm actAs     the bot's account may not act as nobody-here@tpubot-sandbox.iam.gserviceaccount.com")


def test_doctor_warns_not_fails_when_iam_does_not_answer(own_cloud, env):
    from bot.local_stack import free_port

    own_cloud()
    env.setenv("TPU_SERVICE_ACCOUNT", "tpubot-node@tpubot-sandbox.iam.gserviceaccount.com")
    env.setenv("IAM_API_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    result = doctor()
    line = check_line(result.output, "tpu vm actAs")
    assert line.startswith("WARN  tpu vm actAs     not checked: IAM did not answer (") and "Connection refused" in line
    assert "check the network path to iam.googleapis.com" in result.output
    assert "FAIL  tpu vm actAs" not in result.output


def test_the_act_as_grant_names_the_bots_own_account_when_its_credentials_carry_it():
    """Real google-auth service-account credentials (a key of their own, holding a token the sandbox's IAM minted
    for the bot's account): the fix names that account instead of $BOT_SA."""
    from datetime import datetime, timedelta, timezone

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from google.oauth2 import service_account

    from infra.preflight import check_act_as
    from test_first_boot import DEDICATED

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    with CloudSandbox(SandboxWorld(iam_grants=())) as cloud:
        api = cloud.project_api
        bot = api.iam.bot_account
        api.iam.add_account(DEDICATED)
        credentials = service_account.Credentials.from_service_account_info(
            {"client_email": bot, "private_key": key, "token_uri": f"{api.base_url}/token"})
        # What a refresh would have fetched; valid for the check, so google-auth never asks the token URI.
        credentials.token, credentials.expiry = api.iam.mint(bot), (
            datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(hours=1))  # google-auth's naive UTC
        config = PreflightConfig(project="tpubot-sandbox", zone="us-west4-a", iam_endpoint=api.base_url,
                                 tpu_service_account=DEDICATED)
        refused = check_act_as(config, credentials)
        api.iam.grant(api.iam.account_resource(DEDICATED), "roles/iam.serviceAccountUser", bot)
        allowed = check_act_as(config, credentials)
    assert not refused.ok and (f"gcloud iam service-accounts add-iam-policy-binding {DEDICATED} --project "
                               f"tpubot-sandbox --member serviceAccount:{bot} --role roles/iam.serviceAccountUser"
                               ) in refused.fix
    assert "$BOT_SA" not in refused.fix
    assert allowed.ok and not allowed.warning
    assert [caller for _, path, caller in api.requests if path.endswith(":testIamPermissions")] == [bot, bot]
