"""`tpubot doctor`: every check against the sandbox's emulated APIs; the verdict gates `/tpu up`."""

from __future__ import annotations

import os
import logging

import pytest
from typer.testing import CliRunner

from bot.cli import app
from bot.local_stack import LocalStack
from bot.settings import Settings

CHECKS = ("settings", "credentials", "project", "network", "hf token secret", "tpu quota")


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
