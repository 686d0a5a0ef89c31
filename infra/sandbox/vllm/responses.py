"""The exact JSON and SSE shapes vLLM 0.33.0's OpenAI server emits (reference §3).

Non-streaming bodies are `model_dump()`-style: every field present, nulls included, except that
`tool_calls` is popped from `message` when empty. Streaming chunks follow the
`exclude_unset=True` serialization shown in §3.2, field for field.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

def system_fingerprint(served_version: str) -> str:
    """What every response of the sandbox vLLM carries: the release it answers as (the image's), and
    that it is the sandbox (agent/actions/model_endpoint.py reads the `-sandbox` suffix)."""
    return f"vllm-{served_version}-sandbox"


def new_request_id(prefix: str = "chatcmpl") -> str:
    return f"{prefix}-{secrets.token_hex(8)}"


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int = 0

    def body(self, *, with_prompt_details: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
        }
        if with_prompt_details:
            out["prompt_tokens_details"] = None
        # A reasoning parser is configured, so the details object is always present.
        out["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return out


def chat_completion(
    *,
    request_id: str,
    created: int,
    model: str,
    content: str | None,
    reasoning: str | None,
    tool_calls: list[dict[str, Any]],
    finish_reason: str,
    stop_reason: int | str | None,
    usage: Usage,
    fingerprint: str,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": tool_calls,
        "reasoning": reasoning,
    }
    if not tool_calls:
        del message["tool_calls"]  # vLLM's serializer pops an empty list
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                "token_ids": None,
                "routed_experts": None,
                "weight_versions": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": usage.body(with_prompt_details=True),
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def tool_call_body(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class ChunkWriter:
    """Builds the `data: …` lines of one streamed chat completion."""

    def __init__(self, request_id: str, created: int, model: str, fingerprint: str,
                 continuous_usage: bool = False) -> None:
        self.fingerprint = fingerprint
        self.request_id = request_id
        self.created = created
        self.model = model
        self.continuous_usage = continuous_usage

    def _head(self) -> dict[str, Any]:
        return {"id": self.request_id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}

    @staticmethod
    def sse(obj: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"

    def role(self, usage: Usage | None = None) -> bytes:
        body = self._head()
        body["choices"] = [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        ]
        body["prompt_token_ids"] = None
        body["prompt_text"] = None
        if self.continuous_usage and usage:
            body["usage"] = usage.body(with_prompt_details=False)
        return self.sse(body)

    def delta(self, delta: dict[str, Any], usage: Usage | None = None) -> bytes:
        body = self._head()
        body["choices"] = [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, "token_ids": None}
        ]
        if self.continuous_usage and usage:
            body["usage"] = usage.body(with_prompt_details=False)
        body["kv_transfer_params"] = None
        return self.sse(body)

    def finish(
        self,
        delta: dict[str, Any],
        finish_reason: str,
        stop_reason: int | str | None,
        *,
        with_fingerprint: bool,
        usage: Usage | None = None,
    ) -> bytes:
        body = self._head()
        body["choices"] = [
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                "token_ids": None,
                "weight_versions": None,
            }
        ]
        if self.continuous_usage and usage:
            body["usage"] = usage.body(with_prompt_details=False)
        if with_fingerprint:
            # Without a usage chunk the fingerprint rides on the finish chunk (§3.2).
            body["system_fingerprint"] = self.fingerprint
        body["kv_transfer_params"] = None
        return self.sse(body)

    def usage(self, usage: Usage) -> bytes:
        body = self._head()
        body["choices"] = []
        body["usage"] = usage.body(with_prompt_details=False)
        body["system_fingerprint"] = self.fingerprint
        return self.sse(body)

    DONE = b"data: [DONE]\n\n"


def text_completion(
    *, request_id: str, created: int, model: str, text: str, finish_reason: str, stop_reason: Any, usage: Usage,
    fingerprint: str,
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                "token_ids": None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "completion_tokens": usage.completion_tokens,
            "prompt_tokens_details": None,
        },
        "kv_transfer_params": None,
    }


def text_completion_chunk(
    *, request_id: str, created: int, model: str, text: str, finish_reason: str | None, stop_reason: Any = None
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    return {"id": request_id, "object": "text_completion", "created": created, "model": model, "choices": [choice]}


def error_body(message: str, *, err_type: str = "BadRequestError", code: int = 400, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}
