"""The emulated vLLM 0.33 / Gemma 4 endpoint, driven by the real `openai` client over HTTP.

Vectors come from reference/gemma4-wire.md: §2.5 (non-streaming tool calls), §2.6 (streaming),
§2.8 (reasoning), §3 (JSON/SSE shapes).
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from infra.sandbox.vllm import LatencyModel, Turn, VllmEmulator
from infra.sandbox.vllm.server import GARBAGE_TEXT

MODEL = "google/gemma-4-E2B-it"
Q = '<|"|>'


def _fn(name: str, props: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


TOOLS = [
    _fn("get_weather", {"location": {"type": "string"}, "unit": {"type": "string"}}),
    _fn("set_status", {"is_active": {"type": "boolean"}, "count": {"type": "integer"}, "score": {"type": "number"}}),
    _fn(
        "search",
        {"query": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}, "limit": {"type": "integer"}},
    ),
]
USER = [{"role": "user", "content": "hello"}]


def call(name: str, args: str) -> str:
    return f"<|tool_call>call:{name}{{{args}}}<tool_call|>"


# (raw model text, [(name, arguments JSON)], content) — reference §2.5 rows 1–20.
NON_STREAMING_VECTORS = [
    (call("get_weather", f"location:{Q}London{Q}"), [("get_weather", '{"location": "London"}')], None),
    (
        "Let me check the weather for you. " + call("get_weather", f"location:{Q}Paris{Q}"),
        [("get_weather", '{"location": "Paris"}')],
        "Let me check the weather for you.",
    ),
    (
        call("get_weather", f"location:{Q}London{Q}") + call("get_weather", f"location:{Q}Paris{Q},unit:{Q}celsius{Q}"),
        [("get_weather", '{"location": "London"}'), ("get_weather", '{"location": "Paris", "unit": "celsius"}')],
        None,
    ),
    (call("set_status", "is_active:true,count:42,score:3.14"), [("set_status", '{"is_active": true, "count": 42, "score": 3.14}')], None),
    (
        call("unknown_tool", "count:42,flag:true,ratio:0.5,none:null"),
        [("unknown_tool", '{"count": "42", "flag": "true", "ratio": "0.5", "none": "null"}')],
        None,
    ),
    (
        call("search", f"limit:5,query:{Q}disk usage{Q},tags:[{Q}prod{Q},{Q}db{Q}]"),
        [("search", '{"limit": 5, "query": "disk usage", "tags": ["prod", "db"]}')],
        None,
    ),
    (
        call("unknown_tool", f"opts:{{mode:{Q}fast{Q},n:3}},ids:[1,2]"),
        [("unknown_tool", '{"opts": {"mode": "fast", "n": "3"}, "ids": ["1", "2"]}')],
        None,
    ),
    (
        call("search", f'query:{Q}a "quoted" {{brace}}, comma\nnewline{Q}'),
        [("search", '{"query": "a \\"quoted\\" {brace}, comma\\nnewline"}')],
        None,
    ),
    (call("get_status", ""), [("get_status", "{}")], None),
    (f"<|tool_call>call:get_weather{{location:{Q}London", [("get_weather", '{"location": "London"}')], None),
    (call("get_weather", f"location:{Q}Rome{Q}") + "Done.", [("get_weather", '{"location": "Rome"}')], None),
    (
        "<|channel>thought\nUser wants weather.<channel|>" + call("get_weather", f"location:{Q}Oslo{Q}"),
        [("get_weather", '{"location": "Oslo"}')],
        None,
    ),
    (f"<|tool_call>call:get_weather(location:{Q}Paris{Q})<tool_call|>", [("get_weather", '{"location": "Paris"}')], None),
    (f"<|tool_call>:get_weather{{location:{Q}Paris{Q}}}<tool_call|>", [("get_weather", '{"location": "Paris"}')], None),
    (call("search", 'tags:["a","b"],query:"x"'), [("search", '{"tags": ["\\"a\\"", "\\"b\\""], "query": "\\"x\\""}')], None),
    (call("search", f"query:{Q}Zürich café 東京{Q}"), [("search", '{"query": "Zürich café 東京"}')], None),
    (call("search", f" query: {Q}x{Q} , limit: 3 "), [("search", '{"query": "x", "limit": 3}')], None),
    (
        "A " + call("get_weather", f"location:{Q}X{Q}") + " B " + call("get_weather", f"location:{Q}Y{Q}"),
        [("get_weather", '{"location": "X"}'), ("get_weather", '{"location": "Y"}')],
        "A",
    ),
    (call("search", f"query={Q}x{Q},limit=3"), [("search", "{}")], None),
    (call("search", "query:x y z"), [("search", '{"query": "x y z"}')], None),
]


@pytest.fixture
def emu():
    # The vectors are vLLM 0.33.0's (gemma4-wire.md §2.5): the emulator answers as that release.
    with VllmEmulator(latency=LatencyModel.instant(), served_version="0.33.0") as emulator:
        yield emulator


@pytest.fixture
def client(emu):
    return OpenAI(base_url=emu.base_url, api_key="x", max_retries=0, timeout=30)


def _root(emu: VllmEmulator) -> str:
    return emu.base_url.removesuffix("/v1")


@pytest.mark.parametrize("row", range(1, 21))
def test_non_streaming_vectors(emu, client, row):
    raw, expected_calls, expected_content = NON_STREAMING_VECTORS[row - 1]
    emu.push_turns(raw)
    resp = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, tool_choice="auto")
    choice = resp.choices[0]
    calls = [(tc.function.name, tc.function.arguments) for tc in choice.message.tool_calls or []]
    assert calls == expected_calls
    assert choice.message.content == expected_content
    for tc in choice.message.tool_calls:
        assert tc.type == "function"
        assert tc.id.startswith("chatcmpl-tool-") and len(tc.id) == len("chatcmpl-tool-") + 16
    if row == 10:
        assert choice.finish_reason == "length" and choice.stop_reason is None
    else:
        assert choice.finish_reason == "tool_calls"
    if row == 12:
        assert choice.message.reasoning == "User wants weather."


def test_non_streaming_json_shape_is_model_dump_style(emu):
    emu.push_turns(call("get_weather", f"location:{Q}Paris{Q}"), "Plain answer.")
    body = {"model": MODEL, "messages": USER, "tools": TOOLS}
    with httpx.Client() as http:
        first = http.post(f"{emu.base_url}/chat/completions", json=body).json()
        second = http.post(f"{emu.base_url}/chat/completions", json=body).json()
    assert first["id"].startswith("chatcmpl-")
    assert first["model"] == MODEL and first["system_fingerprint"] == "vllm-0.33.0-sandbox"
    message = first["choices"][0]["message"]
    assert list(message) == ["role", "content", "refusal", "annotations", "audio", "function_call", "tool_calls", "reasoning"]
    assert message["content"] is None and message["reasoning"] is None
    assert first["choices"][0]["stop_reason"] == 50
    for key in ("prompt_logprobs", "prompt_token_ids", "kv_transfer_params", "ec_transfer_params", "metrics", "service_tier"):
        assert key in first and first[key] is None
    assert first["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
    assert first["usage"]["prompt_tokens_details"] is None
    text_message = second["choices"][0]["message"]
    assert "tool_calls" not in text_message  # popped when empty
    assert text_message["content"] == "Plain answer."
    assert second["choices"][0]["finish_reason"] == "stop" and second["choices"][0]["stop_reason"] == 106


def _stream(client, turn, **kwargs):
    kwargs.setdefault("tools", TOOLS)
    return list(client.chat.completions.create(model=MODEL, messages=kwargs.pop("messages", USER), stream=True, **kwargs))


def _deltas(chunks):
    """Non-role, non-final deltas as compact tuples."""
    out = []
    for chunk in chunks:
        if not chunk.choices or chunk.choices[0].finish_reason is not None:
            continue
        delta = chunk.choices[0].delta
        if delta.role == "assistant":
            continue
        if delta.content:
            out.append(("content", delta.content))
        reasoning = getattr(delta, "reasoning", None)
        if reasoning:
            out.append(("reasoning", reasoning))
        for tc in delta.tool_calls or []:
            out.append(("call", tc.index, tc.function.name, tc.function.arguments))
    return out


def test_streaming_vector_1_token_wise_call(emu, client):
    emu.push_turns(["<|tool_call>", "call", ":", "get", "_weather", "{", "location", ":", Q, "Paris", ",", " France", Q, "}", "<tool_call|>"])
    chunks = _stream(client, None)
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    assert _deltas(chunks) == [
        ("call", 0, "get_weather", None),  # the name chunk carries no arguments key
        ("call", 0, None, '{"location": "'),
        ("call", 0, None, "Paris"),
        ("call", 0, None, ","),
        ("call", 0, None, " France"),
        ("call", 0, None, '"}'),
    ]
    name_chunk = next(c for c in chunks if c.choices and c.choices[0].delta.tool_calls)
    tc = name_chunk.choices[0].delta.tool_calls[0]
    assert tc.id.startswith("chatcmpl-tool-") and tc.type == "function"
    final = chunks[-1].choices[0]
    assert final.finish_reason == "tool_calls" and final.delta.tool_calls is None and final.delta.content is None


def test_streaming_vector_2_typed_arguments(emu, client):
    emu.push_turns(["<|tool_call>", "call:set_status{", "is_active:true,", "count:4", "2,", "score:3.", "14}", "<tool_call|>"])
    assert _deltas(_stream(client, None)) == [
        ("call", 0, "set_status", '{"is_active": '),
        ("call", 0, None, 'true, "count": '),
        ("call", 0, None, '42, "score": 3.14}'),
    ]


def test_streaming_vector_3_reasoning_then_call(emu, client):
    emu.push_turns(["<|channel>", "thought", "\n", "Need", " weather", ".", "<channel|>", "<|tool_call>", "call:get_weather{", "location:", f"{Q}Oslo{Q}", "}", "<tool_call|>"])
    deltas = _deltas(_stream(client, None))
    assert deltas[:3] == [("reasoning", "Need"), ("reasoning", " weather"), ("reasoning", ".")]
    assert deltas[3:] == [
        ("call", 0, "get_weather", None),
        ("call", 0, None, '{"location": "Oslo'),
        ("call", 0, None, '"}'),
    ]


def test_streaming_vector_4_content_then_call(emu, client):
    emu.push_turns(["Let me", " check.", " ", "<|tool_call>", "call:get_weather{", "location:", f"{Q}Oslo{Q}", "}", "<tool_call|>"])
    deltas = _deltas(_stream(client, None))
    assert deltas[:3] == [("content", "Let me"), ("content", " check."), ("content", " ")]
    assert deltas[3][0] == "call"


def test_streaming_vector_5_two_calls_in_one_chunk(emu, client):
    emu.push_turns([call("get_weather", f"location:{Q}London{Q}") + call("get_weather", f"location:{Q}Paris{Q}")])
    chunks = _stream(client, None)
    with_calls = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert len(with_calls) == 1
    entries = with_calls[0].choices[0].delta.tool_calls
    assert [(e.index, e.function.name, e.function.arguments) for e in entries] == [
        (0, "get_weather", '{"location": "London"}'),
        (1, "get_weather", '{"location": "Paris"}'),
    ]
    assert entries[0].id != entries[1].id


def test_streaming_vector_6_after_tool_response_thinking_on(emu, client):
    messages = [
        {"role": "user", "content": "weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"location": "Oslo"}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "15C"},
    ]
    emu.push_turns(["Checking", " result", ".", "<channel|>", "It is", " 15C", "."])
    deltas = _deltas(
        _stream(client, None, messages=messages, extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    )
    assert deltas == [
        ("reasoning", "Checking"),
        ("reasoning", " result"),
        ("reasoning", "."),
        ("content", "It is"),
        ("content", " 15C"),
        ("content", "."),
    ]


@pytest.mark.parametrize("row", range(1, 21))
def test_streamed_fragments_add_up_to_non_streaming_arguments(emu, client, row):
    raw, expected_calls, _content = NON_STREAMING_VECTORS[row - 1]
    emu.push_turns(raw)  # tokenized: one token per engine step
    chunks = _stream(client, None)
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for chunk in chunks:
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if tc.function.name:
                assert tc.index not in names, "name sent twice"
                names[tc.index] = tc.function.name
            args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
    assert [(names[i], args.get(i, "")) for i in sorted(names)] == expected_calls
    for text in args.values():
        json.loads(text)


REASONING_VECTORS = [
    ("<|channel>thought\nActual reasoning here<channel|>Final answer", "Actual reasoning here", "Final answer"),
    ("<|channel>thought\nLine1\nLine2<channel|>Answer", "Line1\nLine2", "Answer"),
    ("<|channel>This is a reasoning section<channel|>This is the rest", "This is a reasoning section", "This is the rest"),
    ("This is a reasoning section<channel|>This is the rest", "This is a reasoning section", "This is the rest"),
    ("<|channel>This is reasoning", "This is reasoning", None),
    ("Before\n<|channel>This is a reasoning section<channel|>\nThis is the rest", "This is a reasoning section", "Before\n\nThis is the rest"),
    ("<|channel>thought\n<channel|>", None, None),
    ("<|channel>thought\n<channel|>Hi there", None, "Hi there"),
    ("<|channel>thousand reasons<channel|>Done", "thousand reasons", "Done"),
    ("thought\nThe answer is 4.", "The answer is 4.", None),
    ("Hello! How can I help?", None, "Hello! How can I help?"),
    ("<|tool_call>", None, None),
]


@pytest.mark.parametrize("raw,reasoning,content", REASONING_VECTORS)
def test_reasoning_vectors(emu, client, raw, reasoning, content):
    emu.push_turns(raw)
    message = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS).choices[0].message
    assert message.reasoning == reasoning
    assert message.content == content
    assert not message.tool_calls


def test_streamed_bare_thought_label_goes_to_reasoning(emu, client):
    emu.push_turns(["thought", "\n", "The answer", " is 4."])
    assert _deltas(_stream(client, None)) == [("reasoning", "The answer"), ("reasoning", " is 4.")]


def test_raw_tool_call_text_left_in_content(emu, client):
    raw = "Let me look. " + call("get_weather", f"location:{Q}Paris{Q}")
    emu.push_turns(Turn(text=raw, tool_parser=False), Turn(chunks=[raw], tool_parser=False))
    choice = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS).choices[0]
    assert choice.message.content == raw
    assert not choice.message.tool_calls
    assert choice.finish_reason == "stop" and choice.stop_reason == 50
    streamed = "".join(d[1] for d in _deltas(_stream(client, None)) if d[0] == "content")
    assert streamed == raw


def test_emulator_wide_raw_mode():
    with VllmEmulator(latency=LatencyModel.instant(), tool_parser=False, script=[call("get_status", "")]) as emu:
        client = OpenAI(base_url=emu.base_url, api_key="x", max_retries=0)
        message = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS).choices[0].message
    assert message.content == "<|tool_call>call:get_status{}<tool_call|>"


def test_fault_tool_calls_as_text_leaves_the_raw_call_in_content(emu, client):
    # A server started without --enable-auto-tool-choice --tool-call-parser gemma4 (issue 28).
    emu.model_fault = "tool_calls_as_text"
    try:
        emu.push_turns(call("status", ""), [call("status", "")])
        choice = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS).choices[0]
        streamed = "".join(d[1] for d in _deltas(_stream(client, None)) if d[0] == "content")
    finally:
        emu.model_fault = "none"
    assert choice.message.content == "<|tool_call>call:status{}<tool_call|>" and not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    assert streamed == "<|tool_call>call:status{}<tool_call|>"


def test_fault_garbage_text_answers_word_salad_whatever_the_model_was_to_say(emu, client):
    # The torchax serving path's garbage for E2B (issue 28): the turn is used up, its text replaced.
    emu.model_fault = "garbage_text"
    try:
        emu.push_turns(call("get_weather", f"location:{Q}Paris{Q}"))
        choice = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS).choices[0]
    finally:
        emu.model_fault = "none"
    assert emu.pending_turns == 0
    assert choice.message.content == GARBAGE_TEXT and not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    with pytest.raises(ValueError, match="garbage_text, tool_calls_as_text"):
        VllmEmulator(model_fault="garbage")


def test_tool_choice_none_swallows_the_call(emu, client):
    emu.push_turns(call("get_weather", f"location:{Q}Paris{Q}"))
    choice = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, tool_choice="none").choices[0]
    assert choice.message.content is None and not choice.message.tool_calls
    assert choice.finish_reason == "stop"


def test_max_tokens_truncates_a_call_with_finish_length(emu, client):
    emu.push_turns(call("get_weather", f"location:{Q}London, United Kingdom{Q}"), call("get_weather", f"location:{Q}London, United Kingdom{Q}"))
    choice = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, max_tokens=13).choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.tool_calls[0].function.arguments == '{"location": "London, United"}'
    chunks = _stream(client, None, max_completion_tokens=13, stream_options={"include_usage": True})
    streamed = "".join(d[3] or "" for d in _deltas(chunks) if d[0] == "call")
    final = [c for c in chunks if c.choices][-1]
    streamed += "".join(tc.function.arguments or "" for tc in final.choices[0].delta.tool_calls or [])
    assert final.choices[0].finish_reason == "length"
    assert streamed == '{"location": "London, United"}'
    assert chunks[-1].usage.completion_tokens == 13


def test_usage_chunk_and_fingerprint_placement(emu):
    emu.push_turns("Hi there.", "Hi there.")
    body = {"model": MODEL, "messages": USER, "stream": True}
    with httpx.Client() as http:
        with_usage = http.post(f"{emu.base_url}/chat/completions", json=body | {"stream_options": {"include_usage": True}}).text
        without = http.post(f"{emu.base_url}/chat/completions", json=body).text
    events = [line.removeprefix("data: ") for line in with_usage.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    usage_chunk = json.loads(events[-2])
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert usage["completion_tokens"] == 4  # "Hi", " there", "." and the <turn|> stop token
    assert usage["total_tokens"] == usage["prompt_tokens"] + 4
    assert "prompt_tokens_details" not in usage  # exclude_none in chunks
    assert usage_chunk["system_fingerprint"] == "vllm-0.33.0-sandbox"
    finish = json.loads(events[-3])
    assert finish["choices"][0]["delta"] == {} and finish["choices"][0]["stop_reason"] == 106
    assert "system_fingerprint" not in finish
    plain = [json.loads(line.removeprefix("data: ")) for line in without.split("\n\n") if line and "[DONE]" not in line]
    assert all(c["choices"] for c in plain)
    assert plain[-1]["system_fingerprint"] == "vllm-0.33.0-sandbox"
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in plain)
    assert content == "Hi there."


def test_bad_requests_are_rejected_like_vllm(emu, client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=USER, tool_choice="auto")
    body = err.value.body
    assert body["type"] == "BadRequestError" and body["code"] == 400
    assert "tools" in body["message"] and "param" in body
    long_text = " word" * 17_000
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long_text}])
    count = httpx.post(f"{_root(emu)}/tokenize", json={"model": MODEL, "messages": [{"role": "user", "content": long_text}]}).json()["count"]
    assert err.value.body["message"].startswith(
        f"This model's maximum context length is 16384 tokens. However, your prompt contains {count} input tokens"
    )
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="not-the-model", messages=USER)
    assert emu.requests == []  # rejected requests never reach the model


def test_tokenize_matches_usage(emu, client):
    emu.push_turns("ok")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the TPU status?"}]
    tok = httpx.post(f"{_root(emu)}/tokenize", json={"model": MODEL, "messages": messages, "tools": TOOLS}).json()
    assert set(tok) >= {"count", "tokens", "max_model_len"}
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 16384
    usage = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS).usage
    assert usage.prompt_tokens == tok["count"]
    plain = httpx.post(f"{_root(emu)}/tokenize", json={"model": MODEL, "prompt": "hello world"}).json()
    assert plain["tokens"][0] == 2 and plain["count"] == 3  # <bos>, "hello", " world"


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                assert sample.labels["model_name"] == MODEL
                total += sample.value
    return total


def test_metrics_counters_move(emu, client):
    before = httpx.get(f"{_root(emu)}/metrics").text
    emu.push_turns("One two three.")
    usage = client.chat.completions.create(model=MODEL, messages=USER).usage
    after = httpx.get(f"{_root(emu)}/metrics").text
    assert _metric(after, "vllm:request_success_total") == _metric(before, "vllm:request_success_total") + 1
    assert _metric(after, "vllm:request_success_total", finished_reason="stop") >= 1
    assert _metric(after, "vllm:prompt_tokens_total") - _metric(before, "vllm:prompt_tokens_total") == usage.prompt_tokens
    assert (
        _metric(after, "vllm:generation_tokens_total") - _metric(before, "vllm:generation_tokens_total")
        == usage.completion_tokens
    )
    assert _metric(after, "vllm:num_requests_running") == 0 and _metric(after, "vllm:num_requests_waiting") == 0


def test_metrics_can_be_unreachable_or_garbage(emu):
    emu.metrics_mode = "garbage"
    text = httpx.get(f"{_root(emu)}/metrics").text
    with pytest.raises(ValueError):  # prometheus_client's parser on text that is not the exposition format
        families = list(text_string_to_metric_families(text))
        assert any(f.name.startswith("vllm") for f in families)
    emu.metrics_mode = "unreachable"
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{_root(emu)}/metrics", timeout=5)
    emu.metrics_mode = "ok"
    assert "vllm:num_requests_running" in httpx.get(f"{_root(emu)}/metrics").text


def test_raw_completions_return_empty_text_for_the_it_model(emu, client):
    resp = client.completions.create(model=MODEL, prompt="Say hello.", max_tokens=16)
    assert resp.choices[0].text == "" and resp.choices[0].finish_reason == "stop"
    assert resp.usage.completion_tokens == 1
    # Bench traffic still gets exactly the requested number of tokens.
    bench = client.completions.create(model=MODEL, prompt="x", max_tokens=16, extra_body={"ignore_eos": True})
    assert bench.usage.completion_tokens == 16 and bench.choices[0].finish_reason == "length"


def test_models_and_health(emu, client):
    assert [m.id for m in client.models.list()] == [MODEL]
    assert httpx.get(f"{_root(emu)}/health").status_code == 200


def test_ignore_eos_generates_exactly_max_tokens(emu, client):
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=USER, max_completion_tokens=40, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
        )
    )
    assert chunks[-1].usage.completion_tokens == 40
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) == 40  # one token per engine step
    assert [c for c in chunks if c.choices][-1].choices[0].finish_reason == "length"


def test_callable_turn_sees_the_request(emu, client):
    emu.push_turns(lambda req: f"You said {len(req['messages'])} message(s).")
    assert client.chat.completions.create(model=MODEL, messages=USER).choices[0].message.content == "You said 1 message(s)."
    assert emu.requests[-1]["messages"] == USER


def test_heuristic_is_labelled_and_drives_a_tool_loop(emu, client):
    tools = [_fn("get_status", {"channel": {"type": "string"}}), _fn("query_cloud_logs", {"filter": {"type": "string"}})]
    tools[1]["function"]["parameters"]["required"] = ["filter"]
    plain = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert "sandbox model" in plain.choices[0].message.content
    assert "Gemma" in plain.choices[0].message.content  # says it is *not* Gemma
    first = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "any errors in the logs?"}], tools=tools
    ).choices[0]
    assert first.finish_reason == "tool_calls"
    tc = first.message.tool_calls[0]
    assert tc.function.name == "query_cloud_logs" and "filter" in json.loads(tc.function.arguments)
    followup = [
        {"role": "user", "content": "any errors in the logs?"},
        {"role": "assistant", "content": None, "tool_calls": [tc.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": tc.id, "content": "L12 ERROR disk full\nL40 ERROR oom-killer"},
    ]
    answer = client.chat.completions.create(model=MODEL, messages=followup, tools=tools).choices[0].message.content
    assert "sandbox model" in answer and "L12" in answer and "L40" in answer and "disk full" in answer


@pytest.mark.parametrize("question", ["what is the status?", "Status?", "is it up?", "what does it cost? $"])
def test_heuristic_hears_a_question_mark_as_the_word_before_it(emu, client, question):
    """Issue 29 item 5: "status?" is the word status (the `?` was kept in the word)."""
    tools = [_fn("get_status", {"channel": {"type": "string"}}), _fn("estimate_cost", {"hours": {"type": "number"}})]
    choice = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}], tools=tools).choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    expected = "estimate_cost" if "cost" in question else "get_status"
    assert choice.message.tool_calls[0].function.name == expected
