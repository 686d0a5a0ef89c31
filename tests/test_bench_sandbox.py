"""A small sweep against the sandbox vLLM emulator shows the KV wall (issue 7): at 8,192 tokens
of context, 64 concurrent requests overflow the ~290k-token KV pool, get preempted and
recomputed, and deliver less output throughput than 16.

Wall-clock throughput here is the emulator's simulated throughput divided by TIME_SCALE.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from infra.bench import SweepConfig, run_sweep
from infra.bench_report import results_table
from infra.capacity import V5E_1, max_concurrent_requests, plan
from infra.sandbox.vllm import LatencyModel, VllmEmulator

# Real seconds per simulated second. The two cells are ~100 s of simulated engine time, so the
# test takes ~11 s. Much faster and the Python cost of streaming 64 responses per engine step
# (client and emulator share the machine) starts to dominate the wall-clock figures.
TIME_SCALE = 0.1


@pytest.fixture
def emulator() -> Iterator[VllmEmulator]:
    server = VllmEmulator(latency=LatencyModel().scaled(TIME_SCALE))
    server.start()
    yield server
    server.stop()


def test_sweep_against_sandbox_shows_the_kv_wall(emulator: VllmEmulator) -> None:
    pool = plan(V5E_1).kv_pool_tokens
    fits = max_concurrent_requests(pool, 8192 + 128)
    assert 16 <= fits < 64  # the planner predicts the wall between 16 and 64

    preemptions_before: dict[tuple[int, int], float] = {}
    order: list[tuple[int, int]] = []

    def cell_started(context: int, concurrency: int) -> None:
        order.append((context, concurrency))
        preemptions_before[(context, concurrency)] = emulator.engine_stats()["preemptions"]

    config = SweepConfig(base_url=emulator.base_url, model=emulator.model, concurrencies=(16, 64),
                         contexts=(8192,), output_len=128, request_timeout_s=120)
    result = asyncio.run(run_sweep(config, on_cell_start=cell_started))
    final = emulator.engine_stats()["preemptions"]
    preemptions = {
        cell: (preemptions_before[order[i + 1]] if i + 1 < len(order) else final) - preemptions_before[cell]
        for i, cell in enumerate(order)
    }

    table = results_table(result)
    row = next(r for r in table.rows if r[:2] == ["8192", "64"])
    assert f"{result.cell(8192, 64).metrics['output_throughput']:.1f}" in row

    for cell in result.cells:
        assert cell.metrics["failed"] == 0, cell.errors
        assert cell.metrics["completed"] == 2 * cell.concurrency
        assert cell.mean_prompt_tokens == cell.context  # calibrated prompts hit the length exactly
        assert cell.metrics["total_output_tokens"] == 128 * cell.metrics["completed"]  # ignore_eos honoured

    wall_16 = result.cell(8192, 16).metrics["output_throughput"]
    wall_64 = result.cell(8192, 64).metrics["output_throughput"]
    # The KV wall: 4x the requests, but only `fits` of them run at once, so throughput grows by
    # less than fits/16, the most a batch capped at `fits` could give. Compared as a ratio
    # with that much room, not as "64 is slower than 16": which of the two is faster depends on
    # the recompute cost against the machine's load, and failed in loaded runs at 0.2 %.
    assert wall_64 < wall_16 * fits / 16, (wall_16, wall_64, fits)
    assert preemptions[(8192, 64)] > 0 and preemptions[(8192, 16)] == 0  # ... and its cause
    # Beyond the wall requests queue and are recomputed: TTFT and E2EL climb.
    assert result.cell(8192, 64).metrics["p99_ttft_ms"] > 2 * result.cell(8192, 16).metrics["p99_ttft_ms"]
    assert result.cell(8192, 64).metrics["mean_e2el_ms"] > result.cell(8192, 16).metrics["mean_e2el_ms"]
