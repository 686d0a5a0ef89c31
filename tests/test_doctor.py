"""`tpubot doctor`: every check against the sandbox's emulated APIs; the verdict gates `/tpu up`."""

from __future__ import annotations

import asyncio
import os
import logging

import pytest
from typer.testing import CliRunner

from bot.cli import app
from bot.local_stack import LocalStack
from bot.settings import Settings

CHECKS = ("settings", "credentials", "project", "network", "model firewall", "hf token secret", "tpu quota")


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TPUBOT_ENV_FILE", os.devnull)  # no tpu.env: a named file that is missing is an error
    for name in ("GCP_PROJECT", "REDIS_URL", "HF_TOKEN_SECRET", "NETWORK", "SUBNETWORK", "TPU_ZONE"):
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


def test_doctor_fails_with_the_fix_when_the_secret_is_missing(env):
    env.setenv("HF_TOKEN_SECRET", "gemma-hf-token")
    result = doctor()
    assert result.exit_code != 0
    line = next(l for l in result.output.splitlines() if l.startswith("FAIL"))
    assert "hf token secret" in line and "gemma-hf-token" in line
    assert "gcloud secrets create gemma-hf-token" in result.output
    assert "PASS  network" in result.output and "1 check(s) failed" in result.output


def test_doctor_names_a_missing_network_and_zero_quota(env):
    env.setenv("NETWORK", "prod-vpc")
    env.setenv("TPU_ZONE", "us-east5-a")  # not in the sandbox: no quota there
    result = doctor()
    assert result.exit_code == 1
    assert "FAIL  network          network 'prod-vpc' does not exist" in result.output
    assert "set NETWORK to an existing VPC network" in result.output
    assert "FAIL  tpu quota" in result.output


def test_failed_verdict_is_cached_and_up_explains_it_instead_of_searching(env, redis_url, tmp_path):
    env.setenv("REDIS_URL", redis_url)
    env.setenv("HF_TOKEN_SECRET", "gemma-hf-token")
    assert doctor().exit_code == 1
    settings = Settings.load(tmp_path / "none.env", redis_url=redis_url)
    with LocalStack(settings) as stack:
        slack = stack.signed_requests()
        reply = slack.slash("up", user="UALICE", channel="C0DOC")
        assert "tpubot doctor" in reply.text and "hf token secret" in reply.text
        assert "gcloud secrets create gemma-hf-token" in reply.text
        assert "holds no TPU" in slack.slash("status", user="UALICE", channel="C0DOC").text
        assert stack.tpu_sandbox.create_attempts == []
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
    assert "1 check(s) failed" in result.output
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
    quota = lines.index(next(l for l in lines if l.startswith("FAIL  tpu quota")))
    secret = lines.index(next(l for l in lines if l.startswith("FAIL  hf token secret")))
    assert "Permission 'cloudquotas.quotas.get' denied" in lines[quota]
    assert "roles/cloudquotas.viewer" in lines[quota + 1] and "enable" not in lines[quota + 1]
    assert "Permission 'secretmanager.versions.access' denied" in lines[secret]
    assert "roles/secretmanager.secretAccessor" in lines[secret + 1] and "enable" not in lines[secret + 1]


def test_a_half_configured_sandbox_never_asks_google(own_cloud, env):
    cloud = own_cloud()
    for name in ("COMPUTE_API_ENDPOINT", "QUOTAS_API_ENDPOINT", "SECRETMANAGER_API_ENDPOINT"):
        env.delenv(name)  # only TPU_API_ENDPOINT points at the running sandbox
    result = doctor()
    assert result.exit_code == 0, result.output
    assert "COMPUTE_API_ENDPOINT, QUOTAS_API_ENDPOINT, SECRETMANAGER_API_ENDPOINT started here" in result.output
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
    google = PreflightConfig(project=local.project, zone=local.zone, sandbox=local.sandbox,
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
