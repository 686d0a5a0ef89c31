"""`tpubot eval --endpoint` on a dead, wrong or failing endpoint (issue 41): the gate's figures are
the model's, or the case is an error scored 0; a dead endpoint is one line and exit 2."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from aiohttp import web

from infra.sandbox.vllm import LatencyModel, VllmEmulator
from infra.sandbox.vllm.responses import error_body
from test_eval import INCIDENT, _eval
import pytest

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)

TOO_LONG = "kernel: EXT4-fs error (device sda1): ext4_find_entry"
DISK_INCIDENT = f'''
id = "disk-errors"
kind = "generic-service"
mention = "why does the worker keep failing?"
logs = """
2026-11-03T11:00:01Z INFO worker: batch 1 done
2026-11-03T11:00:02Z ERROR {TOO_LONG}:1466: inode #2: comm worker: reading directory lblock 0
2026-11-03T11:00:03Z ERROR {TOO_LONG}:1466: inode #2: comm worker: reading directory lblock 0
2026-11-03T11:00:04Z INFO worker: batch 2 retried
"""
[expect]
facts = ["file ?system", "fsck"]
evidence_lines = [2, 3]
'''


CRASHES_ON = "worker pid 4711"
CRASH_INCIDENT = INCIDENT.replace('id = "ledger-lock"', 'id = "ledger-crash"').replace(
    "request 5 ok in 25 ms", f"request 5 ok in 25 ms ({CRASHES_ON})")


class FailingModel(VllmEmulator):
    """vLLM that fails some incidents: a request holding `too_long` gets vLLM's 400 (`maximum context
    length`), as a server started with a short --max-model-len answers; one holding `crash` has its
    connection dropped with no response, as a server that dies does. Every other request is answered."""

    def __init__(self, *, too_long: str, crash: str) -> None:
        super().__init__(latency=LatencyModel.instant())
        self.too_long, self.crash = too_long, crash
        self.refused = self.dropped = 0

    def create_app(self) -> web.Application:
        app = super().create_app()
        app.middlewares.append(self._too_long)
        return app

    @web.middleware
    async def _too_long(self, request: web.Request, handler) -> web.StreamResponse:
        body = await request.text() if request.path.endswith("/chat/completions") else ""
        if self.crash in body:
            self.dropped += 1
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        if self.too_long in body:
            self.refused += 1
            message = ("This model's maximum context length is 2048 tokens. However, your prompt contains 2311 "
                       "input tokens, which leaves no room for output. Please reduce the length of the input messages.")
            return web.json_response(error_body(message), status=400)
        return await handler(request)


def _cases(tmp_path: Path) -> Path:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "ledger.toml").write_text(INCIDENT, encoding="utf-8")
    (cases / "disk.toml").write_text(DISK_INCIDENT, encoding="utf-8")
    (cases / "crash.toml").write_text(CRASH_INCIDENT, encoding="utf-8")
    return cases


def test_a_dead_endpoint_is_one_line_naming_it_and_exit_2(tmp_path):
    with socket.socket() as held:  # a port nothing listens on once it is closed
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
    dead = f"http://127.0.0.1:{port}/v1"
    result = _eval(tmp_path, "--endpoint", dead, "--cases", str(_cases(tmp_path)), "--only-cases")
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"--endpoint {dead}: nothing answered GET {dead}/models (")
    assert "Nothing was scored." in line and "GEMMA_BASE_URL" not in line


def test_an_endpoint_that_is_not_vllms_base_url_or_serves_another_model_is_refused_before_running(tmp_path):
    cases = _cases(tmp_path)
    with VllmEmulator(latency=LatencyModel.instant()) as model:
        root = model.base_url.removesuffix("/v1")
        wrong_url = _eval(tmp_path, "--endpoint", root, "--cases", str(cases), "--only-cases")
        other_model = _eval(tmp_path, "--endpoint", model.base_url, "--model", "google/gemma-3-1b-it",
                            "--cases", str(cases), "--only-cases")
        asked = len(model.requests)
    assert wrong_url.returncode == 2 and wrong_url.stderr.count("\n") == 1
    assert f"GET {root}/models answered HTTP 404, not a model list" in wrong_url.stderr and "/v1" in wrong_url.stderr
    assert other_model.returncode == 2 and other_model.stderr.count("\n") == 1
    assert "it serves google/gemma-4-E2B-it, not --model google/gemma-3-1b-it" in other_model.stderr
    assert asked == 0  # no case reached the model
    # The model-less arm needs no endpoint: it is not asked.
    alone = _eval(tmp_path, "--endpoint", root, "--arms", "modelless", "--cases", str(cases), "--only-cases")
    assert alone.returncode == 0, alone.stderr


def test_cases_the_model_fails_are_errors_scored_0_not_model_less_answers(tmp_path):
    cases = _cases(tmp_path)
    with FailingModel(too_long=TOO_LONG, crash=CRASHES_ON) as model:
        report = _eval(tmp_path, "--endpoint", model.base_url, "--cases", str(cases), "--only-cases",
                       "--arms", "agent,bare,modelless", "--json")
        table = _eval(tmp_path, "--endpoint", model.base_url, "--cases", str(cases), "--only-cases",
                      "--arms", "agent")
    assert model.refused == 3  # the disk case: agent and bare, then agent again
    assert model.dropped >= 3  # the crash case likewise, each asked again by the client's retry
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    arms = {arm["arm"]: arm for arm in data["arms"]}
    assert arms["agent"]["errors"] == 2 and arms["bare"]["errors"] == 2 and arms["modelless"]["errors"] == 0
    case = {(c["arm"], c["case"]): c for c in data["cases"]}
    failed = case[("agent", "disk-errors")]
    assert failed["score"] == 0 and failed["answer"] == "" and not failed["passed"]
    assert "--endpoint" in failed["error"] and "HTTP 400" in failed["error"] and "GEMMA_BASE_URL" not in failed["error"]
    assert case[("bare", "disk-errors")]["score"] == 0 and "maximum context length" in case[("bare", "disk-errors")]["error"]
    crashed = case[("agent", "ledger-crash")]
    assert crashed["score"] == 0 and "--endpoint" in crashed["error"] and "did not answer" in crashed["error"]
    # The model answered the other case, and that answer is scored as the model's.
    answered = case[("agent", "ledger-lock")]
    assert answered["error"] == "" and answered["score"] > 0
    # Without the fallback counted, the agent arm would show the model-less arm's figure for the failed case.
    assert case[("modelless", "disk-errors")]["score"] > 0
    assert abs(arms["agent"]["score"] - 100 * answered["score"] / 3) < 0.1

    assert table.returncode == 0, table.stderr
    assert "Traceback" not in table.stderr
    lines = table.stderr.splitlines()
    assert len(lines) == 3  # one line per case, nothing else
    assert any(line.strip().startswith("agent     disk-errors: 0 (error: ") for line in lines)
    said = " ".join(table.stdout.split())
    assert "agent: 2 of 3 cases got no answer from the model and score 0 (errors)" in said


def test_an_endpoint_behind_an_api_key_is_evaluated_with_gemma_api_key_and_refused_without(tmp_path):
    """The README's gate runs against a lease's own vLLM, which answers 401 without the lease's key
    (`vllm serve` with VLLM_API_KEY): GEMMA_API_KEY is what the eval sends, and never prints."""
    import os
    import subprocess

    from test_eval import TPUBOT

    cases = _cases(tmp_path)
    key = "k3y-of-the-lease-" + "7" * 20
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "GEMMA_"))}
    with VllmEmulator(latency=LatencyModel.instant(), api_key=key) as model:
        def run(**extra: str) -> subprocess.CompletedProcess:
            return subprocess.run([str(TPUBOT), "eval", "--endpoint", model.base_url, "--cases", str(cases),
                                   "--only-cases", "--arms", "agent,bare", "--json"], capture_output=True, text=True,
                                  cwd=tmp_path, env={**env, **extra}, timeout=600)

        without = run()
        keyed = run(GEMMA_API_KEY=key)
    assert without.returncode == 2 and "401" in without.stderr and without.stderr.count("\n") == 1, without.stderr
    assert keyed.returncode == 0, keyed.stderr
    arms = {arm["arm"]: arm for arm in json.loads(keyed.stdout)["arms"]}
    assert arms["agent"]["errors"] == 0 and arms["bare"]["errors"] == 0, arms
    assert key not in keyed.stdout + keyed.stderr + without.stderr
