"""Is the Gemma endpoint on the TPU VM serving, and how fast? Two probes over plain HTTP.

- `list_models`: `GET /v1/models` — cheap, answers as soon as vLLM's API server is up; used to wait.
- `probe_chat`: one real streamed chat completion through `/v1/chat/completions`, timed with
  `vllm bench serve`'s definitions (reference/gemma4-wire.md §5, shared with infra/bench.py): TTFT
  at the first output-bearing chunk, TPOT = (E2EL − TTFT) / (output tokens − 1), output tokens from
  the usage chunk. Never raw `/v1/completions`: without the chat template an -it model answers
  with empty text (§3.4), which would look like a dead model.

The endpoint is always derived from the node: `http://{external IP}:{MODEL_PORT}/v1`; both probes
send the lease's API key (vLLM answers 401 on `/v1/*` without it).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import httpx

from infra.bench import StreamRecorder, chat_completions_url, error_message

PROBE_PROMPT = "Reply with one short sentence confirming you are online."
PROBE_MAX_TOKENS = 32


def endpoint_url(external_ip: str, port: int) -> str:
    host = f"[{external_ip}]" if ":" in external_ip else external_ip
    return f"http://{host}:{port}/v1"


@dataclass(frozen=True)
class ModelsCheck:
    ok: bool
    models: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class ChatProbe:
    ok: bool
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    tokens_per_s: float = 0.0  # output tokens / end-to-end latency of the one request
    output_tokens: int = 0
    text: str = ""
    model: str = ""
    system_fingerprint: str = ""
    error: str = ""

    @property
    def served_by(self) -> str:
        return f"{self.model} ({self.system_fingerprint})" if self.system_fingerprint else self.model


def auth_headers(api_key: str | None) -> dict[str, str]:
    """vLLM's `--api-key` check: `Authorization: Bearer KEY` on every `/v1/*` request."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def list_models(base_url: str, *, timeout: float = 5.0, api_key: str | None = None) -> ModelsCheck:
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False, headers=auth_headers(api_key)) as client:
            response = await client.get(f"{base_url.rstrip('/')}/models")
    except httpx.ConnectError:
        return ModelsCheck(False, error="nothing listens there yet (connection refused)")
    except httpx.TimeoutException:
        return ModelsCheck(False, error=f"no answer within {timeout:g}s")
    except httpx.HTTPError as error:
        return ModelsCheck(False, error=f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
    if response.status_code == 401:
        return ModelsCheck(False, error="HTTP 401 from /v1/models: vLLM wants a different API key than the lease's "
                                        "(the VM reads it from Secret Manager at boot)")
    if response.status_code != 200:
        return ModelsCheck(False, error=f"HTTP {response.status_code} from /v1/models")
    try:
        models = tuple(str(item["id"]) for item in response.json().get("data", []))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ModelsCheck(False, error="/v1/models answered with something that is not an OpenAI model list")
    return ModelsCheck(True, models)


async def probe_chat(base_url: str, model: str, *, timeout: float = 60.0,
                     max_tokens: int = PROBE_MAX_TOKENS, api_key: str | None = None) -> ChatProbe:
    payload = {
        "model": model,
        "messages": [{"role": "user", "content": PROBE_PROMPT}],
        "max_completion_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    url = chat_completions_url(base_url)
    text: list[str] = []
    meta = {"model": "", "fingerprint": ""}
    start = time.perf_counter()  # just before the POST, as vLLM's benchmark does
    recorder = StreamRecorder(start)
    try:
        async with asyncio.timeout(timeout):
            async with httpx.AsyncClient(timeout=timeout, trust_env=False, headers=auth_headers(api_key)) as client:
                async with client.stream("POST", url, json=payload) as response:
                    if response.status_code != 200:
                        body = (await response.aread()).decode("utf-8", "replace")
                        return ChatProbe(False, error=f"HTTP {response.status_code} from /v1/chat/completions: "
                                                      f"{error_message(body)}")
                    async for line in response.aiter_lines():
                        arrived = time.perf_counter()
                        if not line.startswith("data:"):
                            continue
                        data = line[len("data:"):].strip()
                        _collect(data, text, meta)
                        if not recorder.feed(data, arrived):
                            break
    except (httpx.HTTPError, TimeoutError, ValueError) as error:
        return ChatProbe(False, error=f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
    outcome = recorder.finish()
    reply = "".join(text).strip()
    if not outcome.success:
        return ChatProbe(False, error=outcome.error or "the stream carried no output")
    if not reply:
        return ChatProbe(False, output_tokens=outcome.output_tokens, model=meta["model"],
                         system_fingerprint=meta["fingerprint"],
                         error="the model streamed no text for a plain chat prompt")
    tpot = outcome.tpot
    return ChatProbe(
        True,
        ttft_ms=outcome.ttft * 1000,
        tpot_ms=(tpot or 0.0) * 1000,
        tokens_per_s=outcome.output_tokens / outcome.latency if outcome.latency > 0 else 0.0,
        output_tokens=outcome.output_tokens,
        text=reply,
        model=meta["model"] or model,
        system_fingerprint=meta["fingerprint"],
    )


def _collect(data: str, text: list[str], meta: dict[str, str]) -> None:
    if not data or data == "[DONE]":
        return
    try:
        chunk = json.loads(data)
    except ValueError:
        return
    meta["model"] = meta["model"] or str(chunk.get("model") or "")
    meta["fingerprint"] = meta["fingerprint"] or str(chunk.get("system_fingerprint") or "")
    for choice in chunk.get("choices") or []:
        content = (choice.get("delta") or {}).get("content")
        if content:
            text.append(content)
