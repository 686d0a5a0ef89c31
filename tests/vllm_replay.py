"""Replay a recorded vLLM parser case through the emulator's HTTP API with the real `openai` client.

A case (the shape of `/work/shared/conformance/vllm-0.33-gemma4-parser.json`): the raw text the
model generated, as the engine's streaming chunks; the tool set declared; how generation ended;
and what vLLM returned, non-streaming (`non_streaming`) and as concatenated deltas
(`streaming_total`): content, reasoning, tool_calls as [name, arguments JSON], finish.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI

from infra.sandbox.vllm import LatencyModel, Turn, VllmEmulator

USER = [{"role": "user", "content": "hello"}]


# One emulator and one real openai client per test module (import both fixtures by name). The
# hand-written cases follow vLLM 0.33.0's code, so this emulator answers as 0.33.0.
@pytest.fixture(scope="module")
def emu():
    with VllmEmulator(latency=LatencyModel.instant(), served_version="0.33.0") as e:
        yield e


@pytest.fixture(scope="module")
def client(emu):
    with OpenAI(base_url=emu.base_url, api_key="x", max_retries=0) as c:
        yield c


def _turn(case: dict[str, Any]) -> Turn:
    if case["engine_finish"] == "length":
        stop = "length"
    else:  # a stop token: <|tool_response> after a call, <turn|> otherwise
        stop = "tool_response" if case["raw"].rstrip().endswith("<tool_call|>") else "turn"
    return Turn(chunks=list(case["streaming_chunks"]), stop=stop)


def _request(case: dict[str, Any], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"model": "google/gemma-4-E2B-it", "messages": case.get("messages") or USER}
    if case.get("request_has_tools", True) and tools:
        kwargs["tools"] = tools
        kwargs["tool_choice"] = case.get("tool_choice", "auto")
    if case.get("chat_template_kwargs"):
        kwargs["extra_body"] = {"chat_template_kwargs": case["chat_template_kwargs"]}
    return kwargs


def replay_non_streaming(emu: VllmEmulator, client: OpenAI, case: dict, tools: list | None) -> dict[str, Any]:
    emu.push_turns(_turn(case))
    resp = client.chat.completions.create(**_request(case, tools))
    choice = resp.choices[0]
    msg = choice.message
    return {
        "content": msg.content,
        "reasoning": getattr(msg, "reasoning", None) or (msg.model_extra or {}).get("reasoning"),
        "tool_calls": [[c.function.name, c.function.arguments] for c in msg.tool_calls or []],
        "finish": choice.finish_reason,
    }


def replay_streaming(emu: VllmEmulator, client: OpenAI, case: dict, tools: list | None) -> dict[str, Any]:
    emu.push_turns(_turn(case))
    content: str | None = None
    reasoning: str | None = None
    calls: dict[int, list[str]] = {}
    finish = None
    for chunk in client.chat.completions.create(stream=True, **_request(case, tools)):
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                content = (content or "") + delta.content
            extra = delta.model_extra or {}
            if extra.get("reasoning"):
                reasoning = (reasoning or "") + extra["reasoning"]
            for tc in delta.tool_calls or []:
                entry = calls.setdefault(tc.index, ["", ""])
                if tc.function and tc.function.name:
                    entry[0] += tc.function.name
                if tc.function and tc.function.arguments:
                    entry[1] += tc.function.arguments
            if choice.finish_reason:
                finish = choice.finish_reason
    return {
        "content": content,
        "reasoning": reasoning,
        "tool_calls": [calls[i] for i in sorted(calls)],
        "finish": finish,
    }


def expected(recorded: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": recorded.get("content"),
        "reasoning": recorded.get("reasoning"),
        "tool_calls": [list(c) for c in recorded.get("tool_calls") or []],
        "finish": recorded.get("finish"),
    }
