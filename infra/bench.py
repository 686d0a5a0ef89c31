"""A concurrency × context load test of a streaming `/v1/chat/completions` endpoint that measures
exactly what `vllm bench serve --backend openai-chat` measures (shared/reference/gemma4-wire.md §5),
so its numbers can be compared with vLLM's own:

- the clock starts just before the POST;
- TTFT is the arrival of the first *output-bearing* chunk (the opening role chunk does not count);
- ITL is one sample per output chunk after the first (a chunk may carry several tokens);
- E2EL is the arrival of the last output chunk (the finish, usage and [DONE] lines do not count);
- output tokens come from the usage chunk (`stream_options.include_usage`), the prompt length from
  `usage.prompt_tokens`;
- per-request TPOT = (E2EL − TTFT) / (output tokens − 1), only when more than one token;
- failed requests (HTTP error, exception, no output chunk) are left out of every statistic;
- mean, median, population std and numpy-style linear percentiles, in ms;
- request / output / total token throughput over the wall time of the whole cell.

Raw httpx streaming is used instead of the `openai` client so that each timestamp is taken when the
line arrives, not after a client library has parsed and wrapped it.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx

METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_PERCENTILES: tuple[float, ...] = (99,)

# Prompt-length estimate. Every word below is a common lowercase English word of at most 8
# letters, which Gemma's 262k-entry SentencePiece vocabulary holds as one token together with its
# leading space (and which the sandbox's tokenizer also counts as one), so a prompt of N words is
# ~N tokens. The chat template adds ~9 tokens around one user turn (<bos>, <|turn>, "user", "\n",
# <turn|>, "\n", <|turn>, "model", "\n"). Before a sweep the estimate is calibrated against the
# server's own `usage.prompt_tokens` (two tiny probes), and every cell reports the server's count,
# so a tokenizer that disagrees shows up in the output.
TOKENS_PER_WORD_ESTIMATE = 1.0
CHAT_TEMPLATE_OVERHEAD_TOKENS = 9
_WORDS = tuple(
    "the time people way year day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "number night point home water room mother area money story fact month lot right "
    "study book eye job word business issue side kind head house service friend father power hour "
    "game line end member law car city name team minute idea kid body "
    "back parent face others level office door health person art war history party "
    "result change morning reason research girl guy moment air teacher force".split()
)
_PROBE_SEED = 80_000_000  # calibration prompts, apart from the sweep's seeds (< 96**4)
# A prompt starts with this many words that spell its seed in base len(_WORDS): unique prefixes
# of a fixed token count (a number would vary in length with the seed).
_SEED_WORDS = 4


# --- statistics (numpy's definitions, without requiring numpy) -------------------------------


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def pstdev(values: Sequence[float]) -> float:
    """Population standard deviation, like `np.std` (ddof=0)."""
    if not values:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def percentile(values: Sequence[float], p: float) -> float:
    """`np.percentile(values, p)` with the default 'linear' method: the value at rank
    p/100 × (n − 1) of the sorted sample, interpolated between its neighbours."""
    if not values:
        return 0.0
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentile_key(p: float) -> str:
    """vLLM's spelling: p99, p99.9."""
    return f"p{int(p)}" if int(p) == p else f"p{p}"


# --- one request ----------------------------------------------------------------------------


@dataclass
class RequestOutcome:
    """What one streamed request measured; times are seconds from the clock start."""

    success: bool = False
    ttft: float = 0.0
    latency: float = 0.0  # E2EL
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    output_chunks: int = 0
    usage_reported: bool = False
    error: str = ""

    @property
    def tpot(self) -> float | None:
        if self.output_tokens > 1:
            return (self.latency - self.ttft) / (self.output_tokens - 1)
        return None


def is_output_chunk(chunk: dict[str, Any]) -> bool:
    """vLLM's rule for openai-chat: choices[0].delta has truthy content, reasoning, tool_calls or
    function_call, or content == "" without a role (the opening role chunk is not output)."""
    choices = chunk.get("choices") or []
    if not choices:
        return False
    delta = choices[0].get("delta") or {}
    if any(delta.get(key) for key in ("content", "reasoning", "reasoning_content", "tool_calls", "function_call")):
        return True
    return delta.get("content") == "" and "role" not in delta


class StreamRecorder:
    """Turns the `data:` payloads of one SSE response, each with its arrival time, into a
    RequestOutcome. Pure: the caller supplies the timestamps, so the definitions are testable."""

    def __init__(self, start: float, prompt_tokens_estimate: int = 0) -> None:
        self.start = start
        self.outcome = RequestOutcome(prompt_tokens=prompt_tokens_estimate)
        self._last_output_at: float | None = None

    def feed(self, data: str, arrived_at: float) -> bool:
        """One `data:` payload; returns False once the stream says [DONE]."""
        data = data.strip()
        if data == "[DONE]":
            return False
        if not data:
            return True
        chunk = json.loads(data)
        if "error" in chunk and "choices" not in chunk:
            self.outcome.error = str(chunk["error"].get("message", chunk["error"]))
            return True
        if usage := chunk.get("usage"):
            if usage.get("completion_tokens") is not None:
                self.outcome.output_tokens = int(usage["completion_tokens"])
                self.outcome.usage_reported = True
            if usage.get("prompt_tokens") is not None:
                self.outcome.prompt_tokens = int(usage["prompt_tokens"])
        if is_output_chunk(chunk):
            if self._last_output_at is None:
                self.outcome.ttft = arrived_at - self.start
            else:
                self.outcome.itl.append(arrived_at - self._last_output_at)
            self._last_output_at = arrived_at
            self.outcome.output_chunks += 1
        return True

    def finish(self) -> RequestOutcome:
        out = self.outcome
        if self._last_output_at is None:
            out.success = False
            out.error = out.error or "no output chunk in the stream"
            return out
        out.latency = self._last_output_at - self.start
        if not out.usage_reported:
            # vLLM re-tokenizes the text here; without a tokenizer, count chunks (≥1 token each).
            out.output_tokens = out.output_chunks
        out.success = not out.error
        return out


async def stream_chat_completion(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    *,
    timeout_s: float,
    prompt_tokens_estimate: int = 0,
) -> RequestOutcome:
    """POST one streaming chat completion and time it by vLLM's definitions."""
    start = time.perf_counter()  # just before the POST, as vLLM does
    recorder = StreamRecorder(start, prompt_tokens_estimate)
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, json=payload) as response:
                if response.status_code != 200:
                    body = (await response.aread()).decode("utf-8", "replace")
                    recorder.outcome.error = f"HTTP {response.status_code}: {error_message(body)}"
                    return recorder.outcome
                async for line in response.aiter_lines():
                    arrived_at = time.perf_counter()
                    if not line.startswith("data:"):
                        continue  # blank separators, comments, event: lines
                    if not recorder.feed(line[len("data:"):], arrived_at):
                        break
    except Exception as exc:  # any failure is a failed request, never a crashed sweep
        recorder.outcome.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return recorder.outcome
    return recorder.finish()


def error_message(body: str) -> str:
    """An OpenAI-style error body's message (vLLM's `{"error": {"message": …}}`), else the body's start."""
    try:
        return str(json.loads(body)["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return body[:300]


# --- aggregates -------------------------------------------------------------------------------


def summarize(
    outcomes: Sequence[RequestOutcome], duration_s: float, percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> dict[str, Any]:
    """vLLM's result keys for one run: completed, failed, throughputs and, per metric, mean /
    median / std / percentiles in ms. Failed requests count only in `failed`."""
    ok = [o for o in outcomes if o.success]
    samples: dict[str, list[float]] = {
        "ttft": [o.ttft for o in ok],
        "tpot": [t for o in ok if (t := o.tpot) is not None],
        "itl": [gap for o in ok for gap in o.itl],
        "e2el": [o.latency for o in ok],
    }
    total_input = sum(o.prompt_tokens for o in ok)
    total_output = sum(o.output_tokens for o in ok)
    result: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(ok),
        "failed": len(outcomes) - len(ok),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / duration_s if duration_s > 0 else 0.0,
        "output_throughput": total_output / duration_s if duration_s > 0 else 0.0,
        "total_token_throughput": (total_input + total_output) / duration_s if duration_s > 0 else 0.0,
    }
    for name in METRICS:
        values_ms = [v * 1000 for v in samples[name]]
        result[f"mean_{name}_ms"] = mean(values_ms)
        result[f"median_{name}_ms"] = percentile(values_ms, 50)
        result[f"std_{name}_ms"] = pstdev(values_ms)
        for p in percentiles:
            result[f"{percentile_key(p)}_{name}_ms"] = percentile(values_ms, p)
    return result


# --- prompts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptEstimate:
    """tokens ≈ overhead + words × tokens_per_word for one user turn."""

    tokens_per_word: float = TOKENS_PER_WORD_ESTIMATE
    overhead_tokens: float = CHAT_TEMPLATE_OVERHEAD_TOKENS
    calibrated: bool = False

    def words_for(self, context_tokens: int) -> int:
        return max(1, round((context_tokens - self.overhead_tokens) / self.tokens_per_word))

    def tokens_for(self, words: int) -> int:
        return round(self.overhead_tokens + words * self.tokens_per_word)


def synthetic_prompt(words: int, seed: int) -> str:
    """Unique text of `words` words. It opens with the seed spelled in words, so no two prompts
    share a prefix block: vLLM's prefix cache would otherwise make prefill (and KV use) look
    cheaper than it is for distinct users."""
    rest, head = seed, []
    for _ in range(_SEED_WORDS):
        rest, digit = divmod(rest, len(_WORDS))
        head.append(_WORDS[digit])
    rng = random.Random(seed)
    body = head[: max(words, 0)] + [rng.choice(_WORDS) for _ in range(words - len(head))]
    return " ".join(body)


# --- the sweep ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepConfig:
    base_url: str  # http://host:8000 or http://host:8000/v1
    model: str
    api_key: str | None = field(default=None, repr=False)  # vLLM's --api-key (a lease's endpoint has one)
    concurrencies: tuple[int, ...] = (1, 4, 16, 64)
    contexts: tuple[int, ...] = (128, 1024, 8192, 15000)
    output_len: int = 128
    requests_per_cell: int | None = None  # None: 2 × concurrency, at least 4
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    # vLLM stops at EOS by default; a fixed output length makes cells comparable.
    ignore_eos: bool = True
    calibrate: bool = True
    request_timeout_s: float = 600.0  # whole request, first byte to [DONE]
    connect_timeout_s: float = 10.0
    seed: int = 0

    def requests_in(self, concurrency: int) -> int:
        return self.requests_per_cell if self.requests_per_cell else max(4, 2 * concurrency)

    @property
    def total_requests(self) -> int:
        return len(self.contexts) * sum(self.requests_in(c) for c in self.concurrencies)


@dataclass
class CellResult:
    context: int
    concurrency: int
    requests: int
    prompt_words: int
    estimated_prompt_tokens: int
    mean_prompt_tokens: float  # as the server counted them (usage.prompt_tokens)
    metrics: dict[str, Any]
    errors: list[str] = field(default_factory=list)  # distinct failure messages, first few

    def as_dict(self) -> dict[str, Any]:
        row = {k: v for k, v in asdict(self).items() if k != "metrics"}
        row.update(self.metrics)
        return row


@dataclass
class SweepResult:
    config: SweepConfig
    estimate: PromptEstimate
    started_at: str
    cells: list[CellResult]

    def as_dict(self) -> dict[str, Any]:
        config = asdict(self.config)
        config.pop("api_key", None)  # a secret: never in a report, a file or a Slack upload
        return {
            "backend": "openai-chat",
            "endpoint": "/v1/chat/completions",
            "base_url": self.config.base_url,
            "model_id": self.config.model,
            "started_at": self.started_at,
            "config": config,
            "prompt_estimate": asdict(self.estimate),
            "cells": [cell.as_dict() for cell in self.cells],
        }

    def cell(self, context: int, concurrency: int) -> CellResult:
        for cell in self.cells:
            if cell.context == context and cell.concurrency == concurrency:
                return cell
        raise KeyError((context, concurrency))


def chat_completions_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


def _payload(config: SweepConfig, prompt: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": config.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_completion_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        payload["stream_options"] = {"include_usage": True}
    if config.ignore_eos:
        payload["ignore_eos"] = True  # vLLM sampling extension
    return payload


class EndpointNotAnswering(RuntimeError):
    """The first probe of a sweep failed: running the rest would only print rows of zeros."""


async def probe_endpoint(client: httpx.AsyncClient, config: SweepConfig) -> None:
    """One tiny non-streaming request (like the calibration probes); raises EndpointNotAnswering
    with the one-line reason when the endpoint does not answer it with a completion."""
    url = chat_completions_url(config.base_url)
    payload = _payload(config, synthetic_prompt(8, seed=_PROBE_SEED), 1, stream=False)
    try:
        response = await client.post(url, json=payload, timeout=config.connect_timeout_s + 60)
        if response.status_code != 200:
            reason = f"HTTP {response.status_code}: {error_message(response.text)}"
        else:
            response.json()["choices"]
            return
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    raise EndpointNotAnswering(f"{url} did not answer the first probe ({reason}); nothing was measured")


async def calibrate_prompt_estimate(client: httpx.AsyncClient, config: SweepConfig) -> PromptEstimate:
    """Two tiny non-streaming probes give the server's tokens per word and template overhead.
    Falls back to the documented estimate if the server does not report usage."""
    url = chat_completions_url(config.base_url)
    points: list[tuple[int, int]] = []
    for words in (32, 288):
        payload = _payload(config, synthetic_prompt(words, seed=_PROBE_SEED + words), 1, stream=False)
        try:
            response = await client.post(url, json=payload, timeout=config.connect_timeout_s + 60)
            tokens = int(response.json()["usage"]["prompt_tokens"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return PromptEstimate()
        points.append((words, tokens))
    (w1, t1), (w2, t2) = points
    per_word = (t2 - t1) / (w2 - w1)
    if not 0.2 <= per_word <= 5:  # nonsense: keep the documented estimate
        return PromptEstimate()
    return PromptEstimate(tokens_per_word=per_word, overhead_tokens=t1 - per_word * w1, calibrated=True)


async def run_cell(
    client: httpx.AsyncClient,
    config: SweepConfig,
    estimate: PromptEstimate,
    context: int,
    concurrency: int,
    on_request_done: Callable[[RequestOutcome], None] | None = None,
    first_seed: int = 0,
) -> CellResult:
    """`requests_in(concurrency)` requests, all released at once (request rate inf) and at most
    `concurrency` in flight, like `vllm bench serve --max-concurrency`."""
    url = chat_completions_url(config.base_url)
    words = estimate.words_for(context)
    n = config.requests_in(concurrency)
    prompts = [synthetic_prompt(words, seed=first_seed + i)
               for i in range(n)]
    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: str) -> RequestOutcome:
        async with gate:
            outcome = await stream_chat_completion(
                client, url, _payload(config, prompt, config.output_len, stream=True),
                timeout_s=config.request_timeout_s, prompt_tokens_estimate=estimate.tokens_for(words),
            )
        if on_request_done is not None:
            on_request_done(outcome)
        return outcome

    started = time.perf_counter()
    outcomes = await asyncio.gather(*(one(p) for p in prompts))
    duration = time.perf_counter() - started
    ok = [o for o in outcomes if o.success]
    errors = list(dict.fromkeys(o.error for o in outcomes if not o.success))[:5]
    return CellResult(
        context=context,
        concurrency=concurrency,
        requests=n,
        prompt_words=words,
        estimated_prompt_tokens=estimate.tokens_for(words),
        mean_prompt_tokens=mean([o.prompt_tokens for o in ok]),
        metrics=summarize(outcomes, duration, config.percentiles),
        errors=errors,
    )


def _client(config: SweepConfig) -> httpx.AsyncClient:
    biggest = max(config.concurrencies)
    return httpx.AsyncClient(
        timeout=httpx.Timeout(config.request_timeout_s, connect=config.connect_timeout_s),
        limits=httpx.Limits(max_connections=biggest, max_keepalive_connections=biggest),
        headers={"Authorization": f"Bearer {config.api_key}"} if config.api_key else None,
        # Direct connection: a proxy from the environment would add its own latency to every number.
        trust_env=False,
    )


async def run_sweep(
    config: SweepConfig,
    *,
    on_request_done: Callable[[RequestOutcome], None] | None = None,
    on_cell_start: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Every (context, concurrency) cell in turn, contexts outermost."""
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    async with _client(config) as client:
        await probe_endpoint(client, config)
        estimate = await calibrate_prompt_estimate(client, config) if config.calibrate else PromptEstimate()
        cells = []
        next_seed = config.seed * 1_000_000  # every request of the sweep gets its own prompt
        for context in config.contexts:
            for concurrency in config.concurrencies:
                if on_cell_start is not None:
                    on_cell_start(context, concurrency)
                cells.append(await run_cell(client, config, estimate, context, concurrency, on_request_done, next_seed))
                next_seed += config.requests_in(concurrency)
    return SweepResult(config=config, estimate=estimate, started_at=started_at, cells=cells)


def run_sweep_with_progress(config: SweepConfig, console: Any = None) -> SweepResult:
    """`run_sweep` under a rich progress bar (one tick per finished request). The bar appears
    with the first cell, so an endpoint that fails the first probe leaves only its one line."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=False)
    task = progress.add_task("bench", total=config.total_requests)
    failures = 0
    shown = False

    def cell_started(context: int, concurrency: int) -> None:
        nonlocal shown
        if not shown:
            progress.start()
            shown = True
        progress.update(task, description=f"context {context:>6} × concurrency {concurrency:>3}")

    def request_done(outcome: RequestOutcome) -> None:
        nonlocal failures
        failures += not outcome.success
        progress.advance(task)

    try:
        result = asyncio.run(run_sweep(config, on_request_done=request_done, on_cell_start=cell_started))
        progress.update(task, description=f"done ({failures} failed)")
    finally:
        if shown:
            progress.stop()
    return result
