"""The conformance replay over cases written for the agent's own tool set (`model_tools()`).

Same harness as tests/test_vllm_conformance.py. The expected values follow vLLM 0.33.0's code
(read from the wheel: `vllm/parser/gemma4.py`, `parser_engine.py`, `tool_parsers/utils.py`):
the declared type types a bare value, `json.loads` otherwise; a `nullable` string stays the
string "null" (vLLM reads only `type`); text after a call is streamed but not returned whole.
Each case is replayed non-streaming and streamed token by token.
"""

from __future__ import annotations

import pytest

from agent.llm.prompt import model_tools
from infra.sandbox.vllm.tokens import split_tokens
import vllm_replay
from vllm_replay import expected, replay_non_streaming, replay_streaming

# Fixtures shared with vllm_replay, bound here by name (pytest finds a module's fixtures by name)
client, emu = vllm_replay.client, vllm_replay.emu

Q = '<|"|>'


def call(name: str, args: str = "") -> str:
    return f"<|tool_call>call:{name}{{{args}}}<tool_call|>"


def out(calls=(), content=None, finish=None, reasoning=None) -> dict:
    finish = finish or ("tool_calls" if calls else "stop")
    return {"content": content, "reasoning": reasoning, "tool_calls": [list(c) for c in calls], "finish": finish}


# (id, raw text, engine finish, request has tools, non-streaming, streaming)
CASES = [
    ("provision-zone-hours", call("provision", f"zone:{Q}us-central1-a{Q},hours:2"), "stop", True,
     out([("provision", '{"zone": "us-central1-a", "hours": 2}')]), None),
    ("provision-fraction", call("provision", "hours:1.5"), "stop", True, out([("provision", '{"hours": 1.5}')]), None),
    # `zone` is a nullable string: vLLM types by `type` only, so the bare null stays "null".
    ("provision-nulls", call("provision", "zone:null,hours:null"), "stop", True,
     out([("provision", '{"zone": "null", "hours": null}')]), None),
    ("summarize-typed", call("summarize_logs", f"contains:{Q}OOM{Q},max_tokens:800"), "stop", True,
     out([("summarize_logs", '{"contains": "OOM", "max_tokens": 800}')]), None),
    # number `2.0` -> 2; integer `1e3` -> json.loads -> 1000.0
    ("cloud-logs-numbers", call("query_cloud_logs", f"min_severity:{Q}ERROR{Q},hours:2.0,max_entries:1e3"), "stop",
     True, out([("query_cloud_logs", '{"min_severity": "ERROR", "hours": 2, "max_entries": 1000.0}')]), None),
    ("oncall-array-bool", call("oncall", f"mentions:[{Q}<@U1>{Q}],clear:false"), "stop", True,
     out([("oncall", '{"mentions": ["<@U1>"], "clear": false}')]), None),
    ("status-preamble", "Checking with status. " + call("status"), "stop", True,
     out([("status", "{}")], content="Checking with status."),
     out([("status", "{}")], content="Checking with status. ")),
    ("teardown-then-text", call("teardown") + "Done.", "stop", True,
     out([("teardown", "{}")]), out([("teardown", "{}")], content="Done.")),
    ("summarize-cut-off", f"<|tool_call>call:summarize_logs{{contains:{Q}DEAD", "length", True,
     out([("summarize_logs", '{"contains": "DEAD"}')], finish="length"), None),
    ("answer-now-without-tools", "Let me check. " + call("status"), "stop", False,
     out(content="Let me check."), out(content="Let me check. ")),
    ("plain-answer", "Two OOM errors, at L23 and L37.", "stop", True,
     out(content="Two OOM errors, at L23 and L37."), None),
]


def as_case(case_id, raw, finish, has_tools, whole, streamed) -> dict:
    return {"id": case_id, "raw": raw, "streaming_chunks": split_tokens(raw), "engine_finish": finish,
            "request_has_tools": has_tools, "non_streaming": whole, "streaming_total": streamed or whole}


REPLAYED = [as_case(*c) for c in CASES]


@pytest.mark.parametrize("case", REPLAYED, ids=[c["id"] for c in REPLAYED])
def test_agent_tools_non_streaming(emu, client, case):
    assert replay_non_streaming(emu, client, case, model_tools()) == expected(case["non_streaming"])


@pytest.mark.parametrize("case", REPLAYED, ids=[c["id"] for c in REPLAYED])
def test_agent_tools_streaming(emu, client, case):
    assert replay_streaming(emu, client, case, model_tools()) == expected(case["streaming_total"])
