"""normalize_message / StreamAccumulator on real openai types built from vLLM 0.33's wire JSON.

Shapes are copied from reference gemma4-wire.md §3.1 (non-streaming) and §3.2 (chunks); the
streamed deltas are the §2.6 vectors.
"""

from __future__ import annotations

import copy
import itertools
import json

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import BaseModel

from agent.llm.completion_repair import (
    REPAIR_MARKUP_IN_CONTENT,
    REPAIR_MISSING_TOOL_CALL_ID,
    REPAIR_REASONING_AS_CONTENT,
    REPAIR_REASONING_IN_CONTENT,
    REPAIR_TOOL_CALL_IN_CONTENT,
    REPAIR_TOOL_CALL_IN_REASONING,
    NormalizedTurn,
    StreamAccumulator,
    ToolCallRequest,
    normalize_choice,
    normalize_message,
)
from agent.llm.gemma4_syntax import NOTE_TRUNCATED
from agent.llm.tool_args import coerce_arguments

Q = '<|"|>'

# §3.1, verbatim.
TOOL_CALL_COMPLETION = {
    "id": "chatcmpl-8a1b2c3d4e5f6a7b", "object": "chat.completion", "created": 1767225600, "model": "google/gemma-4-E2B-it",
    "choices": [{"index": 0,
        "message": {"role": "assistant", "content": None, "refusal": None, "annotations": None, "audio": None, "function_call": None,
            "tool_calls": [{"id": "chatcmpl-tool-857f8e1872589300", "type": "function",
                            "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}}],
            "reasoning": None},
        "logprobs": None, "finish_reason": "tool_calls", "stop_reason": 50, "token_ids": None, "routed_experts": None, "weight_versions": None}],
    "service_tier": None, "system_fingerprint": "vllm-0.33.0-1a2b3c4d",
    "usage": {"prompt_tokens": 120, "total_tokens": 138, "completion_tokens": 18, "prompt_tokens_details": None,
              "completion_tokens_details": {"reasoning_tokens": 0}},
    "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None, "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
}  # fmt: skip


def completion(content, *, reasoning=None, tool_calls=None, finish_reason="stop", stop_reason=106):
    """The §3.1 shape with the message swapped; `tool_calls` is popped when empty (§3.1)."""
    data = copy.deepcopy(TOOL_CALL_COMPLETION)
    choice = data["choices"][0]
    message = choice["message"]
    message["content"] = content
    message["reasoning"] = reasoning
    if tool_calls:
        message["tool_calls"] = tool_calls
    else:
        del message["tool_calls"]
    choice["finish_reason"] = finish_reason
    choice["stop_reason"] = stop_reason
    return ChatCompletion.model_validate(data)


def fixed_ids():
    counter = itertools.count(1)
    return lambda: f"repair-{next(counter)}"


# --- non-streaming ----------------------------------------------------------------------------


def test_parser_tool_call_is_taken_as_is():
    choice = ChatCompletion.model_validate(TOOL_CALL_COMPLETION).choices[0]
    turn = normalize_choice(choice)
    assert turn == NormalizedTurn(
        content=None,
        tool_calls=[ToolCallRequest("chatcmpl-tool-857f8e1872589300", "get_weather", '{"location": "Paris"}')],
        reasoning=None,
        repaired=[],
        finish_reason="tool_calls",
    )


def test_plain_answer():
    turn = normalize_message(completion("Paris is sunny, 21C.").choices[0].message)
    assert (turn.content, turn.tool_calls, turn.reasoning, turn.repaired) == ("Paris is sunny, 21C.", [], None, [])


def test_content_null_with_reasoning_uses_reasoning_as_answer():
    # #49717: an unclosed channel puts everything in `reasoning`, content null (§4 item 9).
    message = completion(None, reasoning="The TPU is READY in us-central1-a.", finish_reason="length").choices[0].message
    turn = normalize_message(message)
    assert turn.content == "The TPU is READY in us-central1-a."
    assert turn.repaired == [REPAIR_REASONING_AS_CONTENT]


def test_reasoning_with_an_answer_is_not_copied_into_content():
    turn = normalize_message(completion("It is 15C.", reasoning="Checking result.").choices[0].message)
    assert (turn.content, turn.reasoning, turn.repaired) == ("It is 15C.", "Checking result.", [])


def test_reasoning_is_not_used_as_answer_when_a_tool_call_is_pending():
    raw = copy.deepcopy(TOOL_CALL_COMPLETION)
    raw["choices"][0]["message"]["reasoning"] = "User wants weather."
    turn = normalize_message(ChatCompletion.model_validate(raw).choices[0].message)
    assert turn.content is None
    assert turn.reasoning == "User wants weather."


def test_raw_call_in_content_is_parsed_with_synthesized_id():
    # A deployment without the tool parser returns §2.5 row 2's raw text as content.
    raw = f"Let me check the weather for you. <|tool_call>call:get_weather{{location:{Q}Paris{Q}}}<tool_call|>"
    turn = normalize_message(completion(raw).choices[0].message, id_factory=fixed_ids())
    assert turn.content == "Let me check the weather for you."
    assert turn.tool_calls == [ToolCallRequest("repair-1", "get_weather", '{"location": "Paris"}')]
    assert turn.repaired == [REPAIR_TOOL_CALL_IN_CONTENT]


def test_default_synthesized_ids_are_unique_and_vllm_shaped():
    raw = "<|tool_call>call:a{}<tool_call|><|tool_call>call:b{}<tool_call|>"
    turn = normalize_message(completion(raw).choices[0].message)
    ids = [c.id for c in turn.tool_calls]
    assert len(set(ids)) == 2
    assert all(i.startswith("chatcmpl-tool-") and len(i) == len("chatcmpl-tool-") + 16 for i in ids)


def test_truncated_raw_call_is_returned_and_flagged():
    turn = normalize_choice(completion(f"<|tool_call>call:get_weather{{location:{Q}London", finish_reason="length").choices[0])
    assert [(c.name, json.loads(c.arguments_raw)) for c in turn.tool_calls] == [("get_weather", {"location": "London"})]
    assert NOTE_TRUNCATED in turn.repaired
    assert turn.finish_reason == "length"


def test_reasoning_leak_in_content_is_moved_to_reasoning():
    # #45834: reasoning and a stray `<channel|>` leaked into content after a tool response.
    turn = normalize_message(completion("Checking result.<channel|>It is 15C.").choices[0].message)
    assert (turn.content, turn.reasoning) == ("It is 15C.", "Checking result.")
    assert REPAIR_REASONING_IN_CONTENT in turn.repaired


def test_synthetic_channel_leak_without_reasoning_parser():
    # #57231: `<|channel>thought\n…` ends up in content when only the tool parser is on.
    turn = normalize_message(completion("<|channel>thought\nThe answer is 4.").choices[0].message)
    assert turn.content == "The answer is 4."  # no visible text left, so the reasoning is the answer
    assert turn.repaired == [REPAIR_REASONING_IN_CONTENT, REPAIR_REASONING_AS_CONTENT]


def test_stop_token_and_hallucinated_turn_are_cut_from_content():
    turn = normalize_message(completion("All zones are up.<turn|>\n<|turn>user\nnow tear it down").choices[0].message)
    assert turn.content == "All zones are up."
    assert turn.repaired == [REPAIR_MARKUP_IN_CONTENT]


def test_raw_call_inside_reasoning_is_not_lost():
    message = completion(None, reasoning="Need status.<|tool_call>call:status{zone:<|\"|>a<|\"|>}<tool_call|>").choices[0].message
    turn = normalize_message(message, id_factory=fixed_ids())
    assert turn.tool_calls == [ToolCallRequest("repair-1", "status", '{"zone": "a"}')]
    assert turn.reasoning == "Need status."
    assert turn.content is None
    assert REPAIR_TOOL_CALL_IN_REASONING in turn.repaired


def test_reasoning_content_key_from_older_servers_is_read():
    data = copy.deepcopy(TOOL_CALL_COMPLETION)
    message = data["choices"][0]["message"]
    del message["tool_calls"], message["reasoning"]
    message["reasoning_content"] = "Only here."
    turn = normalize_message(ChatCompletion.model_validate(data).choices[0].message)
    assert turn.content == "Only here."


def test_missing_tool_call_id_is_synthesized():
    data = copy.deepcopy(TOOL_CALL_COMPLETION)
    data["choices"][0]["message"]["tool_calls"][0]["id"] = ""
    turn = normalize_message(ChatCompletion.model_validate(data).choices[0].message, id_factory=fixed_ids())
    assert turn.tool_calls[0].id == "repair-1"
    assert turn.repaired == [REPAIR_MISSING_TOOL_CALL_ID]


def test_empty_message_stays_empty():
    turn = normalize_message(completion(None).choices[0].message)
    assert (turn.content, turn.tool_calls, turn.reasoning, turn.repaired) == (None, [], None, [])


# --- streaming ----------------------------------------------------------------------------------

HEAD = {"id": "chatcmpl-X", "object": "chat.completion.chunk", "created": 1767225600, "model": "google/gemma-4-E2B-it"}
ROLE_CHUNK = {**HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
              "prompt_token_ids": None, "prompt_text": None}  # fmt: skip
USAGE_CHUNK = {**HEAD, "choices": [], "usage": {"prompt_tokens": 120, "total_tokens": 129, "completion_tokens": 9,
               "completion_tokens_details": {"reasoning_tokens": 0}}, "system_fingerprint": "vllm-0.33.0-1a2b3c4d"}  # fmt: skip


def chunk(delta: dict) -> dict:
    return {**HEAD, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, "token_ids": None}],
            "kv_transfer_params": None}  # fmt: skip


def finish(reason: str, stop_reason: int) -> dict:
    return {**HEAD, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason, "stop_reason": stop_reason,
            "token_ids": None, "weight_versions": None}], "kv_transfer_params": None}  # fmt: skip


def name_delta(name: str, call_id: str, index: int = 0, arguments: str | None = None) -> dict:
    function = {"name": name} if arguments is None else {"name": name, "arguments": arguments}
    return {"tool_calls": [{"id": call_id, "type": "function", "index": index, "function": function}]}


def args_delta(fragment: str, index: int = 0) -> dict:
    return {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}


def run_stream(*chunks: dict, id_factory=None) -> NormalizedTurn:
    acc = StreamAccumulator(id_factory=id_factory) if id_factory else StreamAccumulator()
    for raw in chunks:
        acc.feed(ChatCompletionChunk.model_validate(raw))
    return acc.result()


# §3.2 (== §2.6 vector 1's server-side framing)
WEATHER_CALL_CHUNKS = [
    chunk(name_delta("get_weather", "chatcmpl-tool-a522e0a0a4352205")),
    chunk(args_delta('{"location": "')),
    chunk(args_delta("Paris")),
    chunk(args_delta('"}')),
]


def test_section_3_2_sequence():
    turn = run_stream(ROLE_CHUNK, *WEATHER_CALL_CHUNKS, finish("tool_calls", 50), USAGE_CHUNK)
    assert turn == NormalizedTurn(
        content=None,
        tool_calls=[ToolCallRequest("chatcmpl-tool-a522e0a0a4352205", "get_weather", '{"location": "Paris"}')],
        reasoning=None,
        repaired=[],
        finish_reason="tool_calls",
        completion_tokens=9,  # from the usage chunk: with max_tokens, whether the call was cut off
    )
    assert not turn.cut_off(max_tokens=10) and turn.cut_off(max_tokens=9)


def test_usage_chunk_is_kept():
    acc = StreamAccumulator()
    for raw in (ROLE_CHUNK, *WEATHER_CALL_CHUNKS, finish("tool_calls", 50), USAGE_CHUNK):
        acc.feed(ChatCompletionChunk.model_validate(raw))
    assert acc.usage.completion_tokens == 9


TOKENWISE = [
    chunk(name_delta("get_weather", "chatcmpl-tool-0123456789abcdef")),
    chunk(args_delta('{"location": "')),
    chunk(args_delta("Paris")),
    chunk(args_delta(",")),
    chunk(args_delta(" France")),
    chunk(args_delta('"}')),
]


def test_2_6_vector_1_token_wise_call():
    turn = run_stream(ROLE_CHUNK, *TOKENWISE, finish("tool_calls", 50))
    assert turn.tool_calls == [ToolCallRequest("chatcmpl-tool-0123456789abcdef", "get_weather", '{"location": "Paris, France"}')]
    assert turn.content is None


class SetStatus(BaseModel):
    is_active: bool
    count: int
    score: float


def test_2_6_vector_2_typed_arguments_in_one_entry_with_the_name():
    turn = run_stream(
        ROLE_CHUNK,
        chunk(name_delta("set_status", "chatcmpl-tool-1111111111111111", arguments='{"is_active": ')),
        chunk(args_delta('true, "count": ')),
        chunk(args_delta('42, "score": 3.14}')),
        finish("tool_calls", 50),
    )
    [call] = turn.tool_calls
    assert call.arguments_raw == '{"is_active": true, "count": 42, "score": 3.14}'
    assert coerce_arguments(SetStatus, call.arguments_raw) == SetStatus(is_active=True, count=42, score=3.14)


def test_2_6_vector_3_reasoning_then_call():
    turn = run_stream(
        ROLE_CHUNK,
        chunk({"reasoning": "Need"}),
        chunk({"reasoning": " weather"}),
        chunk({"reasoning": "."}),
        *TOKENWISE,
        finish("tool_calls", 50),
    )
    assert turn.reasoning == "Need weather."
    assert turn.content is None  # a pending call: reasoning is not promoted to the answer
    assert [c.name for c in turn.tool_calls] == ["get_weather"]


def test_2_6_vector_4_content_then_call():
    turn = run_stream(
        ROLE_CHUNK,
        chunk({"content": "Let me"}),
        chunk({"content": " check."}),
        chunk({"content": " "}),
        *TOKENWISE,
        finish("tool_calls", 50),
    )
    assert turn.content == "Let me check."
    assert json.loads(turn.tool_calls[0].arguments_raw) == {"location": "Paris, France"}


def test_2_6_vector_5_two_calls_in_one_chunk():
    both = {"tool_calls": [
        {"id": "chatcmpl-tool-aaaaaaaaaaaaaaaa", "type": "function", "index": 0,
         "function": {"name": "get_weather", "arguments": '{"location": "London"}'}},
        {"id": "chatcmpl-tool-bbbbbbbbbbbbbbbb", "type": "function", "index": 1,
         "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}},
    ]}  # fmt: skip
    turn = run_stream(ROLE_CHUNK, chunk(both), finish("tool_calls", 50))
    assert turn.tool_calls == [
        ToolCallRequest("chatcmpl-tool-aaaaaaaaaaaaaaaa", "get_weather", '{"location": "London"}'),
        ToolCallRequest("chatcmpl-tool-bbbbbbbbbbbbbbbb", "get_weather", '{"location": "Paris"}'),
    ]


def test_interleaved_fragments_of_two_calls_are_kept_apart_by_index():
    turn = run_stream(
        chunk(name_delta("a", "chatcmpl-tool-aaaaaaaaaaaaaaaa", index=0)),
        chunk(name_delta("b", "chatcmpl-tool-bbbbbbbbbbbbbbbb", index=1)),
        chunk(args_delta('{"x": ', index=1)),
        chunk(args_delta("{}", index=0)),
        chunk(args_delta("1}", index=1)),
    )
    assert [(c.name, c.arguments_raw) for c in turn.tool_calls] == [("a", "{}"), ("b", '{"x": 1}')]


def test_2_6_vector_6_after_tool_response_thinking_on():
    turn = run_stream(
        ROLE_CHUNK,
        chunk({"reasoning": "Checking"}),
        chunk({"reasoning": " result"}),
        chunk({"reasoning": "."}),
        chunk({"content": "It is"}),
        chunk({"content": " 15C"}),
        chunk({"content": "."}),
        finish("stop", 106),
    )
    assert (turn.content, turn.reasoning, turn.finish_reason, turn.repaired) == ("It is 15C.", "Checking result.", "stop", [])


def test_stream_with_only_reasoning_uses_it_as_answer():
    # #49717: streaming with an open channel sends everything as reasoning deltas.
    turn = run_stream(ROLE_CHUNK, chunk({"reasoning": "Zone a"}), chunk({"reasoning": " is READY."}), finish("length", None))
    assert turn.content == "Zone a is READY."
    assert turn.repaired == [REPAIR_REASONING_AS_CONTENT]


def test_stream_without_tool_parser_raw_call_split_across_content_deltas():
    pieces = ["Checking. <|tool", "_call>call:get_", "weather{location:<|", '"|>Oslo<|"|', ">}<tool_call|>"]
    turn = run_stream(ROLE_CHUNK, *[chunk({"content": p}) for p in pieces], finish("stop", None), id_factory=fixed_ids())
    assert turn.content == "Checking."
    assert turn.tool_calls == [ToolCallRequest("repair-1", "get_weather", '{"location": "Oslo"}')]
    assert turn.repaired == [REPAIR_TOOL_CALL_IN_CONTENT]


def test_stream_fragment_without_id_gets_one():
    turn = run_stream(chunk({"tool_calls": [{"index": 0, "function": {"name": "status", "arguments": "{}"}}]}), id_factory=fixed_ids())
    assert turn.tool_calls == [ToolCallRequest("repair-1", "status", "{}")]
    assert turn.repaired == [REPAIR_MISSING_TOOL_CALL_ID]


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["Checking", " the zone"], "Checking the zone"),
        (["Checking. <|tool"], "Checking."),
        (["Checking. <|tool_call>call:status{"], "Checking."),
        (["<|channel>thought\nhmm", "<channel|>Done"], "Done"),
    ],
)
def test_preview_shows_only_visible_text(pieces, expected):
    acc = StreamAccumulator()
    for p in pieces:
        acc.feed(ChatCompletionChunk.model_validate(chunk({"content": p})))
    assert acc.preview() == expected
