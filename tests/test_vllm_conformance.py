"""The emulator answers exactly as vLLM 0.33.0's gemma4 parsers do.

Cases: `../shared/conformance/vllm-0.33-gemma4-parser.json` (outputs of the real parser modules
of the vllm 0.33.0 wheel; see its `what`/`how` header). Each case is replayed through the
emulator's HTTP API with the real `openai` client, non-streaming and streaming (the recorded
engine chunks are the engine steps). Skips cleanly when the shared file is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_replay import client, emu, expected, replay_non_streaming, replay_streaming  # noqa: F401 (fixtures)

CONFORMANCE = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "vllm-0.33-gemma4-parser.json"
if not CONFORMANCE.exists():
    CONFORMANCE = Path("/work/shared/conformance/vllm-0.33-gemma4-parser.json")


def _load() -> dict:
    if not CONFORMANCE.exists():
        return {"cases": [], "tool_sets": {}}
    return json.loads(CONFORMANCE.read_text())


DATA = _load()
CASES = [c for c in DATA["cases"] if c["tools"] in DATA["tool_sets"]]
pytestmark = pytest.mark.skipif(not CASES, reason=f"conformance file absent: {CONFORMANCE}")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_non_streaming_matches_vllm(emu, client, case):
    got = replay_non_streaming(emu, client, case, DATA["tool_sets"][case["tools"]])
    assert got == expected(case["non_streaming"])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_streaming_matches_vllm(emu, client, case):
    got = replay_streaming(emu, client, case, DATA["tool_sets"][case["tools"]])
    assert got == expected(case["streaming_total"])
