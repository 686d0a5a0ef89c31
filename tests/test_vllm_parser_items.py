"""The five ways the sandbox differed from vLLM 0.33.0's gemma4 parsers (issue 24, items 1–5),
one test each, through the emulator's HTTP API with the real `openai` client. The expected
values are what the real parser returns (the shared conformance cases; vLLM's code in
`vllm/parser/gemma4.py`, `vllm/parser/engine/parser_engine.py`, `vllm/tool_parsers/utils.py`).
"""

from __future__ import annotations

import json

import vllm_replay
from vllm_replay import replay_non_streaming, replay_streaming

# Fixtures shared with vllm_replay, bound here by name (pytest finds a module's fixtures by name)
client, emu = vllm_replay.client, vllm_replay.emu

Q = '<|"|>'


def _fn(name: str, props: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


TYPED = _fn("typed", {
    "maybe_n": {"anyOf": [{"type": "number"}, {"type": "null"}]},
    "maybe_s": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "int_or_null": {"type": ["integer", "null"]},
    "enum_int": {"enum": [1, 2, 3]},
    "i": {"type": "integer"},
    "n": {"type": "number"},
    "b": {"type": "boolean"},
})
WEATHER = _fn("get_weather", {"location": {"type": "string"}})
SEARCH = _fn("search", {"query": {"type": "string"}, "limit": {"type": "integer"}})


def case(raw: str, chunks: list[str] | None = None, finish: str = "stop", **extra) -> dict:
    from infra.sandbox.vllm.tokens import split_tokens

    return {"raw": raw, "streaming_chunks": chunks or split_tokens(raw), "engine_finish": finish, **extra}


def both(emu, client, c: dict, tools: list | None) -> tuple[dict, dict]:
    return replay_non_streaming(emu, client, c, tools), replay_streaming(emu, client, c, tools)


def test_item1_argument_types_follow_anyof_type_lists_enum_and_json_fallback(emu, client):
    raw = ("<|tool_call>call:typed{maybe_n:1e3,maybe_s:null,int_or_null:null,enum_int:2,i:4.0,n:inf,"
           "b:1}<tool_call|>")
    for got in both(emu, client, case(raw), [TYPED]):
        args = json.loads(got["tool_calls"][0][1])
        assert args == {"maybe_n": 1000, "maybe_s": None, "int_or_null": None, "enum_int": 2, "i": 4.0,
                        "n": "inf", "b": True}
        assert isinstance(args["i"], float)  # `4.0` for an integer field: json.loads keeps the float


def test_item2_text_after_and_between_calls_is_streamed_but_not_returned_whole(emu, client):
    call = f"<|tool_call>call:get_weather{{location:{Q}X{Q}}}<tool_call|>"
    c = case(f"A {call} B {call}\nDone.")
    whole, streamed = both(emu, client, c, [WEATHER])
    assert whole["content"] == "A" and streamed["content"] == "A  B \nDone."
    assert len(whole["tool_calls"]) == len(streamed["tool_calls"]) == 2
    # vLLM's deferral: text after a call's end in the same delta waits while deltas carry call
    # output, so text of a later delta overtakes it (its reordering bug).
    chunks = [call[:-12], "<tool_call|>tail", " more<|tool_call>call:get_weather{location:", f"{Q}Y{Q}}}<tool_call|>"]
    reordered = case("".join(chunks), chunks=chunks)
    assert replay_streaming(emu, client, reordered, [WEATHER])["content"] == " moretail"


def test_item3_a_call_cut_off_inside_its_name_comes_back_with_empty_arguments(emu, client):
    for got in both(emu, client, case("<|tool_call>call:get_wea", finish="length"), [WEATHER]):
        assert got["tool_calls"] == [["get_wea", "{}"]] and got["finish"] == "length"


def test_item4_junk_bare_values_split_into_keys_like_vllm(emu, client):
    for got in both(emu, client, case("<|tool_call>call:search{query:a}b,limit:2}<tool_call|>"), [SEARCH]):
        assert got["tool_calls"] == [["search", '{"query": "a", "}b,limit": "2"}']]


def test_item5_without_tools_the_call_text_is_stripped_from_content(emu, client):
    call = "<|tool_call>call:status{}<tool_call|>"
    whole, streamed = both(emu, client, case(f"Let me check. {call}"), None)
    assert whole["content"] == "Let me check." and streamed["content"] == "Let me check. "  # deltas are not stripped
    for got in (whole, streamed):
        assert got["tool_calls"] == [] and got["finish"] == "stop"
    assert replay_non_streaming(emu, client, case(call), None)["content"] is None
