"""One question to a Gemma endpoint through the `openai` client, timed the way `vllm bench serve` times it.

The stream's chunks go through infra/bench.py's StreamRecorder (TTFT at the first output-bearing
chunk, TPOT = (E2EL − TTFT) / (output tokens − 1), output tokens from the usage chunk), so the
figures `ask_model` reports mean what the benchmark's figures mean. Each chunk is timed when the
client yields it, which adds the client's parsing (well under a millisecond) to every figure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infra.bench import StreamRecorder

if TYPE_CHECKING:
    import openai
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionMessageParam


@dataclass(frozen=True)
class TimedAnswer:
    ok: bool
    text: str = ""
    ttft_ms: float = 0.0
    tpot_ms: float | None = None  # None with a single output token
    e2el_ms: float = 0.0
    tokens_per_s: float = 0.0  # output tokens over the request's end-to-end latency
    prompt_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    system_fingerprint: str = ""
    finish_reason: str = ""
    error: str = ""

    def timings(self) -> dict:
        return {"ttft_ms": round(self.ttft_ms, 1), "tpot_ms": None if self.tpot_ms is None else round(self.tpot_ms, 2),
                "e2el_ms": round(self.e2el_ms, 1), "tokens_per_s": round(self.tokens_per_s, 1),
                "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens}


async def ask_timed(client: AsyncOpenAI, model: str, messages: list[ChatCompletionMessageParam], *, max_tokens: int,
                    temperature: float = 0.0) -> TimedAnswer:
    """Stream one chat completion; any API or connection error is a failed answer, never an exception."""
    import openai  # at the call: importing it costs about half of a bot process's start-up CPU

    parts: list[str] = []
    meta = {"model": "", "fingerprint": "", "finish": ""}
    start = time.perf_counter()  # just before the request, as vLLM's benchmark does
    recorder = StreamRecorder(start)
    try:
        stream = await client.chat.completions.create(
            model=model, messages=messages, max_completion_tokens=max_tokens, temperature=temperature,
            stream=True, stream_options={"include_usage": True})
        async for chunk in stream:
            arrived = time.perf_counter()
            recorder.feed(chunk.model_dump_json(exclude_none=True), arrived)
            meta["model"] = meta["model"] or chunk.model or ""
            meta["fingerprint"] = meta["fingerprint"] or chunk.system_fingerprint or ""
            for choice in chunk.choices:
                if choice.delta and choice.delta.content:
                    parts.append(choice.delta.content)
                meta["finish"] = choice.finish_reason or meta["finish"]
    except openai.APIStatusError as error:
        return TimedAnswer(False, error=f"HTTP {error.status_code} from /v1/chat/completions: {_message(error)}")
    except openai.APIError as error:
        return TimedAnswer(False, error=f"{type(error).__name__}: {error}")
    outcome = recorder.finish()
    if not outcome.success:
        return TimedAnswer(False, error=outcome.error or "the stream carried no output")
    tpot = outcome.tpot
    return TimedAnswer(
        True, text="".join(parts).strip(), ttft_ms=outcome.ttft * 1000,
        tpot_ms=None if tpot is None else tpot * 1000, e2el_ms=outcome.latency * 1000,
        tokens_per_s=outcome.output_tokens / outcome.latency if outcome.latency > 0 else 0.0,
        prompt_tokens=outcome.prompt_tokens, output_tokens=outcome.output_tokens, model=meta["model"] or model,
        system_fingerprint=meta["fingerprint"], finish_reason=meta["finish"],
    )


def _message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
        if body.get("message"):
            return str(body["message"])[:300]
    return str(error.message)[:300]
