"""The emulator's engine model: v5e latency defaults, batching gains, and the KV wall.

Throughput figures are taken in simulated time, so they do not depend on how busy this machine
is; the HTTP test checks that the live server runs the same shared scheduler.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest
from openai import AsyncOpenAI, OpenAI
from waiting import wait_for

from infra.sandbox.vllm import LatencyModel, VllmEmulator, simulate_closed_loop
from infra.sandbox.vllm.tokens import count_prompt_tokens

MODEL = "google/gemma-4-E2B-it"


def _run(concurrency: int, prompt_len: int, num_requests: int | None = None, output_len: int = 128):
    return simulate_closed_loop(
        LatencyModel(), concurrency=concurrency, prompt_len=prompt_len, output_len=output_len,
        num_requests=num_requests or concurrency * 2,
    )


def test_single_stream_matches_v5e_measurements():
    short = _run(1, 30, num_requests=1)
    assert short.ttfts[0] == pytest.approx(0.022, abs=0.002)
    assert _run(1, 128, num_requests=1).tpots[0] == pytest.approx(0.0078, abs=0.0001)
    assert _run(1, 15_000, num_requests=1).tpots[0] == pytest.approx(0.0084, abs=0.0001)


def test_ttft_grows_with_context_and_with_queued_prefills():
    ttft_1k, ttft_8k = _run(1, 1024, 1).ttfts[0], _run(1, 8192, 1).ttfts[0]
    assert ttft_8k > 5 * ttft_1k
    queued = _run(16, 1024, num_requests=16)
    # One 4,096-token step prefills four 1k prompts: the last four wait for three such steps.
    assert min(queued.ttfts) > ttft_1k
    assert max(queued.ttfts) > 3 * min(queued.ttfts)


def test_throughput_rises_with_concurrency_below_the_kv_wall():
    figures = [_run(c, 1024).output_throughput for c in (1, 4, 16, 64)]
    assert figures == sorted(figures) and figures[-1] > 5 * figures[0]


def test_kv_wall_at_8k_context_lowers_throughput_from_16_to_64():
    at16, at64 = _run(16, 8192, num_requests=64), _run(64, 8192, num_requests=256)
    assert at16.preemptions == 0  # 16 × 8.3k tokens fit in the ~290k-token pool
    assert at64.preemptions > 0
    assert at64.output_throughput < 0.9 * at16.output_throughput


def _prompt_of(tokens: int) -> list[dict]:
    messages = [{"role": "user", "content": ""}]
    overhead = count_prompt_tokens({"messages": messages})
    messages[0]["content"] = " word" * (tokens - overhead)
    assert count_prompt_tokens({"messages": messages}) == tokens
    return messages


async def _burst(emu: VllmEmulator, n: int, messages: list[dict]) -> tuple[float, list[int]]:
    """n concurrent streaming bench requests released at one simulated instant."""
    client = AsyncOpenAI(base_url=emu.base_url, api_key="x", max_retries=0, timeout=120)

    async def one() -> int:
        stream = await client.chat.completions.create(
            model=MODEL, messages=messages, max_completion_tokens=128, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
        )
        usage = None
        async for chunk in stream:
            usage = chunk.usage or usage
        return usage.completion_tokens

    before = emu.engine_stats()
    emu.pause_engine()
    tasks = [asyncio.create_task(one()) for _ in range(n)]
    await wait_for(lambda: emu.engine_stats()["waiting"] >= n, timeout=60, interval=0.01,
                   what="the whole burst to queue")
    emu.resume_engine()
    tokens = await asyncio.gather(*tasks)
    await client.close()
    busy = emu.engine_stats()["busy_sim_seconds"] - before["busy_sim_seconds"]
    return sum(tokens) / busy, tokens


async def test_kv_wall_over_http_with_the_shared_scheduler():
    messages = _prompt_of(8192)
    with VllmEmulator(latency=LatencyModel.instant()) as emu:
        tput16, tokens16 = await _burst(emu, 16, messages)
        preempt_after_16 = emu.engine_stats()["preemptions"]
        tput64, tokens64 = await _burst(emu, 64, messages)
        preempt_after_64 = emu.engine_stats()["preemptions"]
    assert tokens16 == [128] * 16 and tokens64 == [128] * 64
    assert preempt_after_16 == 0 and preempt_after_64 > 0
    assert tput64 < tput16


def test_live_server_paces_tokens_by_the_latency_model():
    # Lower bounds only: the emulator may run late on a busy machine, never early.
    with VllmEmulator(script=["one two three four five six seven eight nine ten"]) as emu:
        client = OpenAI(base_url=emu.base_url, api_key="x", max_retries=0)
        start = time.perf_counter()
        arrivals = []
        for chunk in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.perf_counter())
    assert arrivals[0] - start >= 0.020  # TTFT ≈ 22 ms
    # ten tokens, one per ~7.8 ms step after the first: counted from the request, since a first chunk
    # read late (a busy client) shortens the gap between first and last without the server being early
    assert arrivals[-1] - start >= 0.020 + 9 * 0.0078 * 0.95
    assert statistics.median(b - a for a, b in zip(arrivals, arrivals[1:])) < 0.5
