"""A latency and KV-cache model of one vLLM engine (Gemma 4 E2B on a TPU v5e-1).

One shared engine advances "steps" for the whole running batch, the way vLLM's scheduler does,
so concurrency effects (batching gains, queueing, preemption) come out of the simulation rather
than from per-request formulas.

Step, simplified from vLLM V1's scheduler:
1. Running requests first, in admission order. Each asks for its remaining prefill tokens (up to
   the step's token budget, `max_num_batched_tokens`) or 1 decode token. If the KV pool has no
   room for them, the most recently admitted running request is preempted (its KV freed, to be
   recomputed from scratch: prompt + tokens generated so far) — vLLM's RECOMPUTE preemption.
2. If nothing was preempted, waiting requests are admitted in arrival order while the budget and
   the KV pool allow their next prefill chunk. Admission looks only at the chunk, not at the
   request's future growth — that optimism is exactly what causes preemption storms beyond the
   KV wall.
3. Step time = decode_step_s (one sequence, short context)
             + kv_read_s_per_token × Σ(context of decoding sequences beyond 128 tokens)
             + seq_overhead_s × (decoding sequences − 1)
             + prefill tokens / prefill_tokens_per_s.
   A request whose prefill completes in a step samples its next token in that step.

Defaults (v5e-1, Gemma 4 E2B, measurements quoted in issues 3 and 7):
- TTFT ≈ 22 ms for one short stream = request_overhead_s (API server: template, tokenize,
  detokenize ≈ 11.7 ms) + one ~10 ms step.
- TPOT 7.8 ms at 128 tokens of context, 8.4 ms at 15k: kv_read_s_per_token = 0.6 ms / 14.9k.
- KV pool: ~5.0 GiB at ≈18 KiB/token ≈ 290,000 tokens (infra/capacity.py derives the same).
- prefill_tokens_per_s = 20,000: a realistic figure for a 2B-effective model on one v5e chip
  (~4.6 GFLOP/token → ~92 TFLOP/s, under half of the 197 TFLOP/s bf16 peak). An 8k-token prompt
  costs ~0.4 s of engine time. (The measured 434.8 tok/s at 16×8,192 would need ~45k tokens/s
  with 128 output tokens — near peak FLOPs — so the sandbox's absolute figures at long context
  are lower than that measurement; its *shape* is what it reproduces.)
- block_size = 128: KV is handed out in 128-token pages (TPU vLLM's paged attention uses large
  pages; 16 is the GPU default). Coarse pages are what make the pool overflow in bursts.
- seq_overhead_s = 0.3 ms per extra decoding sequence (sampling, block tables, padding).
With these, the 8,192-context sweep with 128 output tokens shows the KV wall: concurrency 64
gives ~20% lower output throughput than 16 (the measured drop was 434.8 → 340.3, −22%),
because once the ~290k-token pool is full, running requests keep getting preempted and
recomputed (see `simulate_closed_loop`).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class LatencyModel:
    time_scale: float = 1.0  # real seconds per simulated second; 0 = as fast as possible
    request_overhead_s: float = 0.0117
    decode_step_s: float = 0.0078
    kv_read_s_per_token: float = 0.6e-3 / (15_000 - 128)
    seq_overhead_s: float = 0.0003
    prefill_tokens_per_s: float = 20_000.0
    max_num_batched_tokens: int = 4096
    max_num_seqs: int = 256
    kv_pool_tokens: int = 290_000
    block_size: int = 128

    @classmethod
    def instant(cls, **overrides: Any) -> LatencyModel:
        """Same model, no waiting: for tests that do not care about timing."""
        return cls(time_scale=0.0, **overrides)

    def scaled(self, time_scale: float) -> LatencyModel:
        return replace(self, time_scale=time_scale)

    def step_seconds(self, prefill_tokens: int, decode_contexts: list[int]) -> float:
        if not prefill_tokens and not decode_contexts:
            return 0.0
        extra_ctx = sum(max(0, c - 128) for c in decode_contexts)
        return (
            self.decode_step_s
            + self.kv_read_s_per_token * extra_ctx
            + self.seq_overhead_s * max(0, len(decode_contexts) - 1)
            + prefill_tokens / self.prefill_tokens_per_s
        )


_ids = itertools.count(1)


@dataclass(eq=False)
class Sequence:
    """One request inside the engine: lengths only, the text lives with the HTTP handler."""

    prompt_len: int
    output_len: int  # tokens to generate in total (including the stop token)
    arrival: float = 0.0  # simulated seconds
    seq_id: int = field(default_factory=lambda: next(_ids))
    generated: int = 0
    computed: int = 0  # tokens whose KV is in the pool
    blocks: int = 0
    preemptions: int = 0
    first_token_time: float | None = None
    finish_time: float | None = None
    finished: bool = False
    aborted: bool = False
    # (generated count, simulated time) per step that produced a token; drained by the handler.
    progress: collections.deque = field(default_factory=collections.deque)
    on_progress: Callable[[], None] | None = None

    @property
    def prefill_target(self) -> int:
        # A recomputed request re-prefills its prompt and everything it generated so far.
        return self.prompt_len + self.generated


@dataclass
class StepResult:
    duration: float
    advanced: list[Sequence]
    preempted: int


class EngineCore:
    """Pure, clock-free scheduler state. `step()` says how long the step takes."""

    def __init__(self, latency: LatencyModel) -> None:
        self.latency = latency
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.running: list[Sequence] = []
        self.total_blocks = latency.kv_pool_tokens // latency.block_size
        self.free_blocks = self.total_blocks
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def abort(self, seq: Sequence) -> None:
        seq.aborted = True
        if seq in self.running:
            self.running.remove(seq)
            self._free(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.free_blocks / self.total_blocks

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.latency.block_size)

    def _free(self, seq: Sequence) -> None:
        self.free_blocks += seq.blocks
        seq.blocks = 0

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self._free(seq)
        seq.computed = 0
        seq.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def step(self) -> StepResult:
        lat = self.latency
        budget = lat.max_num_batched_tokens
        scheduled: list[tuple[Sequence, int]] = []
        preempted = 0
        for seq in list(self.running):
            if budget <= 0:
                break
            if seq not in self.running:
                continue  # preempted earlier in this loop
            n = min(seq.prefill_target - seq.computed, budget)
            need = self._blocks_for(seq.computed + n) - seq.blocks
            while need > self.free_blocks and seq in self.running:
                victim = self.running[-1]
                self._preempt(victim)
                preempted += 1
                if victim is not seq:
                    scheduled = [(s, k) for s, k in scheduled if s is not victim]
            if seq not in self.running:
                break
            self.free_blocks -= need
            seq.blocks += need
            scheduled.append((seq, n))
            budget -= n
        if not preempted:
            while self.waiting and budget > 0 and len(self.running) < lat.max_num_seqs:
                seq = self.waiting[0]
                n = min(seq.prefill_target - seq.computed, budget)
                need = self._blocks_for(seq.computed + n) - seq.blocks
                if need > self.free_blocks:
                    break
                self.waiting.popleft()
                self.running.append(seq)
                self.free_blocks -= need
                seq.blocks += need
                scheduled.append((seq, n))
                budget -= n
        prefill_tokens = 0
        decode_contexts: list[int] = []
        for seq, n in scheduled:
            if seq.prefill_target - seq.computed == 1:
                decode_contexts.append(seq.computed + 1)
            else:
                prefill_tokens += n
        duration = lat.step_seconds(prefill_tokens, decode_contexts)
        advanced = []
        for seq, n in scheduled:
            seq.computed += n
            if seq.computed >= seq.prefill_target:
                seq.generated += 1  # the step samples one token
                advanced.append(seq)
                if seq.generated >= seq.output_len:
                    seq.finished = True
                    self.running.remove(seq)
                    self._free(seq)
        return StepResult(duration=duration, advanced=advanced, preempted=preempted)


# --------------------------------------------------------------------------------------------
# Offline simulation (deterministic, no sleeping): used by tests and benchmarks
# --------------------------------------------------------------------------------------------


@dataclass
class SimulationResult:
    duration: float
    completed: int
    output_tokens: int
    preemptions: int
    ttfts: list[float]
    tpots: list[float]  # (finish − first token) / (output − 1), per request (vllm bench's TPOT)

    @property
    def output_throughput(self) -> float:
        return self.output_tokens / self.duration if self.duration else 0.0


def simulate_closed_loop(
    latency: LatencyModel, *, concurrency: int, prompt_len: int, output_len: int, num_requests: int
) -> SimulationResult:
    """`vllm bench serve --max-concurrency C --request-rate inf` in simulated time: C requests in
    flight, each completion immediately replaced until `num_requests` were sent."""
    core = EngineCore(latency)
    now = 0.0
    sent = 0
    pending: list[float] = []  # arrival times of requests still in the API server
    done: list[Sequence] = []
    for _ in range(min(concurrency, num_requests)):
        pending.append(now + latency.request_overhead_s)
        sent += 1
    while len(done) < num_requests:
        pending.sort()
        while pending and pending[0] <= now + 1e-12:
            core.add(Sequence(prompt_len=prompt_len, output_len=output_len, arrival=pending.pop(0) - latency.request_overhead_s))
        if not core.has_work():
            now = pending[0]
            continue
        result = core.step()
        now += result.duration
        for seq in result.advanced:
            if seq.first_token_time is None:
                seq.first_token_time = now
            if seq.finished:
                seq.finish_time = now
                done.append(seq)
                if sent < num_requests:
                    pending.append(now + latency.request_overhead_s)
                    sent += 1
    start = min(s.arrival for s in done)
    # (sequence, first token, finish): both times are set above on every sequence that finished
    timed = [(s, s.first_token_time, s.finish_time) for s in done
             if s.first_token_time is not None and s.finish_time is not None]
    return SimulationResult(
        duration=max(finish for _, _, finish in timed) - start,
        completed=len(done),
        output_tokens=sum(s.output_len for s in done),
        preemptions=core.num_preemptions,
        ttfts=[first - s.arrival for s, first, _ in timed],
        tpots=[(finish - first) / (s.output_len - 1) for s, first, finish in timed if s.output_len > 1],
    )


# --------------------------------------------------------------------------------------------
# The live engine loop inside the emulator's event loop
# --------------------------------------------------------------------------------------------


@dataclass
class EngineStats:
    preemptions: int = 0
    steps: int = 0
    busy_sim_seconds: float = 0.0
    generated_tokens: int = 0


class AsyncEngine:
    """Runs `EngineCore` steps on an asyncio loop, pacing them to the latency model.

    Simulated time only advances by step durations (and by idle gaps, scaled), so figures
    derived from it are independent of how fast this machine runs the Python.
    """

    def __init__(self, latency: LatencyModel) -> None:
        self.latency = latency
        self.core = EngineCore(latency)
        self.stats = EngineStats()
        self.sim_now = 0.0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._idle_since_real: float | None = None
        self._allowed: asyncio.Event | None = None

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._allowed = asyncio.Event()
        self._allowed.set()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def pause(self) -> None:
        """Hold the engine between steps (requests still queue): lets a test line up a burst of
        arrivals at one simulated instant, like `--request-rate inf` on a fast client."""
        assert self._allowed is not None
        self._allowed.clear()

    def resume(self) -> None:
        assert self._allowed is not None
        self._allowed.set()

    @property
    def num_running(self) -> int:
        return len(self.core.running)

    @property
    def num_waiting(self) -> int:
        return len(self.core.waiting)

    async def request_overhead(self) -> None:
        """API-server time before a request reaches the engine (counted in TTFT)."""
        delay = self.latency.request_overhead_s * self.latency.time_scale
        if delay > 0:
            await asyncio.sleep(delay)

    def submit(self, seq: Sequence) -> None:
        seq.arrival = self._now_sim()
        self.core.add(seq)
        assert self._wake is not None
        self._wake.set()

    def abort(self, seq: Sequence) -> None:
        self.core.abort(seq)

    def _now_sim(self) -> float:
        if not self.core.has_work() and self._idle_since_real is not None and self.latency.time_scale > 0:
            return self.sim_now + (time.monotonic() - self._idle_since_real) / self.latency.time_scale
        return self.sim_now

    async def _run(self) -> None:
        assert self._wake is not None
        scale = self.latency.time_scale
        self._idle_since_real = time.monotonic()
        while True:
            if not self.core.has_work():
                self._idle_since_real = time.monotonic()
                self._wake.clear()
                await self._wake.wait()
                continue
            if self._allowed is not None and not self._allowed.is_set():
                await self._allowed.wait()
            # Leaving idle: simulated time catches up with the idle gap.
            if self._idle_since_real is not None:
                self.sim_now = self._now_sim()
                self._idle_since_real = None
            anchor_real, anchor_sim = time.monotonic(), self.sim_now
            while self.core.has_work():
                if self._allowed is not None and not self._allowed.is_set():
                    await self._allowed.wait()
                    anchor_real, anchor_sim = time.monotonic(), self.sim_now
                result = self.core.step()
                self.sim_now += result.duration
                self.stats.steps += 1
                self.stats.busy_sim_seconds += result.duration
                self.stats.preemptions += result.preempted
                if scale > 0:
                    delay = anchor_real + (self.sim_now - anchor_sim) * scale - time.monotonic()
                    await asyncio.sleep(max(0.0, delay))
                else:
                    await asyncio.sleep(0)
                for seq in result.advanced:
                    if seq.aborted:
                        continue
                    if seq.first_token_time is None:
                        seq.first_token_time = self.sim_now
                    if seq.finished:
                        seq.finish_time = self.sim_now
                    self.stats.generated_tokens += 1
                    seq.progress.append((seq.generated, self.sim_now))
                    if seq.on_progress:
                        seq.on_progress()
                if not self.core.waiting and not self.core.running:
                    break
