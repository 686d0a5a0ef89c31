"""The emulator answers exactly as the vLLM release it is configured as (issue 28).

Cases: `../shared/conformance/vllm-tpu-0.32-gemma4-parser.json` (0.32.0's real chat-completion
serving layer, what the default image `vllm/vllm-tpu:v0.32.0` runs) and
`../shared/conformance/vllm-0.33-gemma4-parser.json` (the real parser modules of the vllm
0.33.0 wheel); see each file's `what`/`how` header. The two differ only where a non-streaming
auto tool call was cut off at max_tokens ("tool_calls" on 0.32.0, "length" on 0.33.0). Each case
is replayed through the HTTP API of an emulator constructed as that version, with the real
`openai` client, non-streaming and streaming (the recorded engine chunks are the engine steps).
Skips cleanly when the shared files are absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI

from infra.sandbox.vllm import DEFAULT_SERVED_VERSION, LatencyModel, VllmEmulator
from vllm_replay import expected, replay_non_streaming, replay_streaming

FILES = {"0.32.0": "vllm-tpu-0.32-gemma4-parser.json", "0.33.0": "vllm-0.33-gemma4-parser.json"}


def _path(name: str) -> Path:
    path = Path(__file__).resolve().parents[2] / "shared" / "conformance" / name
    return path if path.exists() else Path("/work/shared/conformance") / name


def _load(version: str) -> dict:
    path = _path(FILES[version])
    return json.loads(path.read_text()) if path.exists() else {"cases": [], "tool_sets": {}}


DATA = {version: _load(version) for version in FILES}
CASES = [pytest.param(version, case, id=f"{version}-{case['id']}")
         for version, data in DATA.items() for case in data["cases"] if case["tools"] in data["tool_sets"]]
pytestmark = pytest.mark.skipif(not CASES, reason="conformance files absent")


@pytest.fixture(scope="module")
def served():
    """version -> (emulator answering as that version, a real openai client on it)."""
    emulators = {v: VllmEmulator(latency=LatencyModel.instant(), served_version=v) for v in FILES}
    clients = {}
    try:
        for version, emulator in emulators.items():
            emulator.start()
            clients[version] = OpenAI(base_url=emulator.base_url, api_key="x", max_retries=0)
        yield {v: (emulators[v], clients[v]) for v in FILES}
    finally:
        for c in clients.values():
            c.close()
        for emulator in emulators.values():
            emulator.stop()


@pytest.mark.parametrize(("version", "case"), CASES)
def test_non_streaming_matches_vllm(served, version, case):
    emu, client = served[version]
    got = replay_non_streaming(emu, client, case, DATA[version]["tool_sets"][case["tools"]])
    assert got == expected(case["non_streaming"])


@pytest.mark.parametrize(("version", "case"), CASES)
def test_streaming_matches_vllm(served, version, case):
    emu, client = served[version]
    got = replay_streaming(emu, client, case, DATA[version]["tool_sets"][case["tools"]])
    assert got == expected(case["streaming_total"])


def test_the_sandbox_answers_as_the_default_image_s_release_unless_told_otherwise():
    assert DEFAULT_SERVED_VERSION == "0.32.0"
    with VllmEmulator(latency=LatencyModel.instant()) as emu:
        assert emu.served_version == "0.32.0"
    with pytest.raises(ValueError, match="0.32.0, 0.33.0"):
        VllmEmulator(served_version="0.31.0")


def test_the_sandbox_release_follows_the_configured_image():
    from infra.sandbox.vllm.served_version import served_version_for as sandbox_served_version

    assert sandbox_served_version("vllm/vllm-tpu:v0.32.0") == "0.32.0"
    assert sandbox_served_version("vllm/vllm-tpu:v0.33.0") == "0.33.0"
    assert sandbox_served_version("europe-docker.pkg.dev/p/r/vllm-tpu:v0.33.1@sha256:" + "a" * 64) == "0.33.0"
    assert sandbox_served_version("localhost:5000/vllm-tpu@sha256:" + "a" * 64) == "0.32.0"


def test_the_recorder_lists_the_cases_whose_answer_changed():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "tools" / "record_vllm_conformance.py"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--package" in done.stdout, done.stderr
    sys.path.insert(0, str(root / "tools"))
    try:
        from record_vllm_conformance import differing
    finally:
        sys.path.remove(str(root / "tools"))
    old = {"cases": [{"id": "a", "non_streaming": {"tool_calls": [("f", "{}")], "finish": "length"},
                      "streaming_total": {"finish": "length"}}]}
    new = {"cases": [{"id": "a", "non_streaming": {"tool_calls": [["f", "{}"]], "finish": "tool_calls"},
                      "streaming_total": {"finish": "length"}}]}
    changed = differing(old, new)
    assert len(changed) == 1 and changed[0].startswith("a non_streaming: recorded")
