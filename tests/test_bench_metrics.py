"""The bench client measures exactly what `vllm bench serve` measures (gemma4-wire.md §5).

Definitions are checked twice: on exact synthetic timestamps (pure), and over real HTTP against
a small SSE server defined here that streams vLLM's chunk shapes (§3.2) on a known schedule.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from typer.testing import CliRunner

from infra.bench import (
    PromptEstimate,
    RequestOutcome,
    StreamRecorder,
    SweepConfig,
    chat_completions_url,
    is_output_chunk,
    percentile,
    pstdev,
    run_sweep,
    stream_chat_completion,
    summarize,
)
from infra.bench_report import best_cells, load_cells, results_table, write_json, write_plots

MODEL = "google/gemma-4-E2B-it"
TEMPLATE_OVERHEAD = 9  # what the test server adds to the word count, like a chat template


def _chunk(delta: dict[str, Any] | None = None, *, finish: str | None = None, usage: dict | None = None) -> str:
    body: dict[str, Any] = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
    if usage is not None:
        body["choices"] = []
        body["usage"] = usage
    else:
        choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
        if finish:
            choice["stop_reason"] = 106
        body["choices"] = [choice]
    return json.dumps(body)


def stream_script(prompt_tokens: int, gap: float) -> list[tuple[float, str]]:
    """(delay before sending, data payload). With gap=1.0 the delays are in units of 0.1 s:
    role at 0, output at 0.10, 0.15, 0.18, 0.30; finish at 0.34; usage at 0.54."""
    return [
        (0.0, _chunk({"role": "assistant", "content": ""})),  # not output
        (0.10 * gap, _chunk({"content": "Hel"})),
        (0.05 * gap, _chunk({"content": "lo"})),
        (0.03 * gap, _chunk({"content": ""})),  # content "" without role IS output (vLLM's rule)
        (0.12 * gap, _chunk({"reasoning": " world"})),
        (0.04 * gap, _chunk({}, finish="stop")),  # not output
        (0.20 * gap, _chunk(usage={"prompt_tokens": prompt_tokens, "completion_tokens": 9, "total_tokens": prompt_tokens + 9})),
        (0.0, "[DONE]"),
    ]


class SyntheticVllm:
    """A real HTTP server in its own thread and event loop that speaks vLLM's SSE format."""

    def __init__(self, gap: float, fail_every: int = 0) -> None:
        self.gap = gap
        self.fail_every = fail_every
        self.streams = 0
        self.payloads: list[dict[str, Any]] = []
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.base_url = ""

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> "SyntheticVllm":
        self._thread.start()
        assert self._ready.wait(timeout=10), "test server did not start"
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        self.payloads.append(payload)
        prompt = payload["messages"][-1]["content"]
        prompt_tokens = len(prompt.split()) + TEMPLATE_OVERHEAD
        if prompt == "NO OUTPUT":
            script = [(0.0, _chunk({"role": "assistant", "content": ""})), (0.0, _chunk({}, finish="length")), (0.0, "[DONE]")]
        elif not payload.get("stream"):
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1}
            return web.json_response({"id": "x", "object": "chat.completion", "choices": [], "usage": usage})
        else:
            self.streams += 1
            if self.fail_every and self.streams % self.fail_every == 0:
                return web.json_response({"error": {"message": "boom", "type": "InternalServerError", "code": 500}}, status=500)
            script = stream_script(prompt_tokens, self.gap)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for delay, data in script:
            if delay:
                await asyncio.sleep(delay)  # the synthetic stream's own timing
            await response.write(f"data: {data}\n\n".encode())
        await response.write_eof()
        return response


@pytest.fixture
def slow_server() -> Iterator[SyntheticVllm]:
    server = SyntheticVllm(gap=1.0).start()
    yield server
    server.stop()


@pytest.fixture
def fast_server() -> Iterator[SyntheticVllm]:
    server = SyntheticVllm(gap=0.02, fail_every=4).start()
    yield server
    server.stop()


# --- pure definitions on exact timestamps --------------------------------------------------------


def _recorded(start: float, events: list[tuple[float, str]]) -> RequestOutcome:
    recorder = StreamRecorder(start)
    for at, data in events:
        if not recorder.feed(data, at):
            break
    return recorder.finish()


def _absolute(script: list[tuple[float, str]], start: float) -> list[tuple[float, str]]:
    at, events = start, []
    for delay, data in script:
        at += delay
        events.append((at, data))
    return events


def test_request_definitions_on_exact_timestamps() -> None:
    outcome = _recorded(5.0, _absolute(stream_script(42, 1.0), 5.0))
    assert outcome.success
    assert outcome.ttft == pytest.approx(0.10)  # role chunk skipped
    assert outcome.itl == pytest.approx([0.05, 0.03, 0.12])  # one sample per output chunk
    assert outcome.latency == pytest.approx(0.30)  # last output chunk, not finish/usage/[DONE]
    assert outcome.output_tokens == 9 and outcome.prompt_tokens == 42  # from usage
    assert outcome.tpot == pytest.approx((0.30 - 0.10) / 8)


def test_output_chunk_rule() -> None:
    assert not is_output_chunk(json.loads(_chunk({"role": "assistant", "content": ""})))
    assert is_output_chunk(json.loads(_chunk({"content": ""})))
    assert is_output_chunk(json.loads(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]})))
    assert not is_output_chunk(json.loads(_chunk({}, finish="stop")))
    assert not is_output_chunk(json.loads(_chunk(usage={"prompt_tokens": 1, "completion_tokens": 1})))


def test_stream_without_output_or_usage() -> None:
    empty = _recorded(0.0, [(0.0, _chunk({"role": "assistant", "content": ""})), (0.1, _chunk({}, finish="length"))])
    assert not empty.success and "no output" in empty.error
    # No usage chunk: vLLM would re-tokenize; we count output chunks.
    no_usage = _recorded(0.0, [(0.2, _chunk({"content": "a"})), (0.3, _chunk({"content": "b"})), (0.4, "[DONE]")])
    assert no_usage.success and no_usage.output_tokens == 2 and no_usage.latency == pytest.approx(0.3)


def test_aggregates_match_hand_computed_values() -> None:
    a = _recorded(0.0, _absolute(stream_script(42, 1.0), 0.0))  # ttft 100, itl 50/30/120, e2el 300, 9 tok
    b = _recorded(1.0, [(1.2, _chunk({"content": "x"})), (1.22, _chunk({"content": "y"})), (1.26, _chunk({"content": "z"})),
                        (1.27, _chunk(usage={"prompt_tokens": 10, "completion_tokens": 3}))])  # ttft 200, itl 20/40, e2el 260
    d = _recorded(2.0, [(2.4, _chunk({"content": "x"})), (2.5, _chunk(usage={"prompt_tokens": 5, "completion_tokens": 1}))])
    failed = RequestOutcome(success=False, prompt_tokens=1000, output_tokens=500, error="HTTP 500")
    m = summarize([a, b, failed, d], duration_s=2.0, percentiles=(50, 99, 99.9))

    assert (m["completed"], m["failed"]) == (3, 1)
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (57, 13)  # the failure counts nowhere
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(6.5)
    assert m["total_token_throughput"] == pytest.approx(35.0)
    # TTFT [100, 200, 400]
    assert m["mean_ttft_ms"] == pytest.approx(700 / 3)
    assert m["median_ttft_ms"] == pytest.approx(200)
    assert m["std_ttft_ms"] == pytest.approx(math.sqrt(15555.5555), rel=1e-6)  # population std
    assert m["p99_ttft_ms"] == pytest.approx(396.0)  # rank 1.98: 200 + 0.98 × 200
    assert m["p99.9_ttft_ms"] == pytest.approx(399.6)
    # TPOT: a 25 ms, b 30 ms, d has 1 token and is left out
    assert m["mean_tpot_ms"] == pytest.approx(27.5)
    assert m["std_tpot_ms"] == pytest.approx(2.5)
    assert m["p99_tpot_ms"] == pytest.approx(29.95)
    # ITL [50, 30, 120, 20, 40] pooled over requests
    assert m["mean_itl_ms"] == pytest.approx(52.0)
    assert m["median_itl_ms"] == pytest.approx(40.0)
    assert m["p50_itl_ms"] == pytest.approx(40.0)
    assert m["std_itl_ms"] == pytest.approx(math.sqrt(1256))
    assert m["p99_itl_ms"] == pytest.approx(117.2)  # rank 3.96: 50 + 0.96 × 70
    # E2EL [300, 260, 400]
    assert m["mean_e2el_ms"] == pytest.approx(320.0)
    assert m["median_e2el_ms"] == pytest.approx(300.0)
    assert m["p99_e2el_ms"] == pytest.approx(398.0)


def test_all_failed_gives_zeros_like_vllm() -> None:
    m = summarize([RequestOutcome(error="x")], duration_s=1.0)
    assert m["completed"] == 0 and m["failed"] == 1
    assert m["mean_ttft_ms"] == 0.0 and m["p99_itl_ms"] == 0.0 and m["output_throughput"] == 0.0


def test_percentile_and_std_agree_with_numpy() -> None:
    np = pytest.importorskip("numpy")  # numpy arrives with matplotlib; our code does not need it
    rng = random.Random(7)
    for n in (1, 2, 3, 10, 101):
        values = [rng.uniform(0, 1000) for _ in range(n)]
        for p in (0, 1, 25, 50, 90, 99, 99.9, 100):
            assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), abs=1e-9)
        assert pstdev(values) == pytest.approx(float(np.std(values)), abs=1e-9)


def test_base_url_forms() -> None:
    for base in ("http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/chat/completions"):
        assert chat_completions_url(base) == "http://h:8000/v1/chat/completions"


# --- over real HTTP -------------------------------------------------------------------------------


async def test_timings_over_http_follow_the_definitions(slow_server: SyntheticVllm) -> None:
    url = chat_completions_url(slow_server.base_url)
    payload = {"model": MODEL, "messages": [{"role": "user", "content": "one two three"}], "stream": True,
               "stream_options": {"include_usage": True}}
    async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
        outcome = await stream_chat_completion(client, url, payload, timeout_s=10)
        no_output = await stream_chat_completion(
            client, url, {**payload, "messages": [{"role": "user", "content": "NO OUTPUT"}]}, timeout_s=10)
        unreachable = await stream_chat_completion(client, "http://127.0.0.1:9/v1/chat/completions", payload, timeout_s=5)
    assert outcome.success, outcome.error
    # Lower bounds are exact (the server sleeps at least that long); the upper slack absorbs scheduling.
    slack = 0.04
    assert 0.10 - 0.002 <= outcome.ttft <= 0.10 + slack  # the role chunk at ~0 s did not count
    assert len(outcome.itl) == 3
    for measured, scheduled in zip(outcome.itl, (0.05, 0.03, 0.12)):
        assert scheduled - 0.01 <= measured <= scheduled + slack
    assert 0.30 - 0.002 <= outcome.latency <= 0.30 + slack  # usage arrives at 0.54 s: excluded
    assert outcome.output_tokens == 9 and outcome.prompt_tokens == 3 + TEMPLATE_OVERHEAD
    assert outcome.tpot == pytest.approx((outcome.latency - outcome.ttft) / 8)
    assert not no_output.success and "no output" in no_output.error
    assert not unreachable.success and unreachable.error


def _sweep_config(server: SyntheticVllm, **kw: Any) -> SweepConfig:
    defaults = dict(base_url=server.base_url, model=MODEL, concurrencies=(1, 2), contexts=(64, 300),
                    output_len=9, requests_per_cell=4, request_timeout_s=10, connect_timeout_s=5)
    defaults.update(kw)
    return SweepConfig(**defaults)


def test_sweep_json_table_and_png(fast_server: SyntheticVllm, tmp_path: Path) -> None:
    result = asyncio.run(run_sweep(_sweep_config(fast_server)))
    # calibration read the server's tokens/word and template overhead
    assert result.estimate == PromptEstimate(tokens_per_word=1.0, overhead_tokens=TEMPLATE_OVERHEAD, calibrated=True)
    assert [(c.context, c.concurrency) for c in result.cells] == [(64, 1), (64, 2), (300, 1), (300, 2)]
    for cell in result.cells:
        assert cell.mean_prompt_tokens == cell.context  # server-counted prompt length hits the target
        assert (cell.metrics["completed"], cell.metrics["failed"]) == (3, 1)  # every 4th stream fails
        assert cell.errors == ["HTTP 500: boom"]
        assert cell.metrics["total_output_tokens"] == 27
        assert cell.metrics["output_throughput"] == pytest.approx(27 / cell.metrics["duration"])
    streamed = [p for p in fast_server.payloads if p.get("stream")]
    assert all(p["stream_options"] == {"include_usage": True} and p["max_completion_tokens"] == 9
               and p["ignore_eos"] is True for p in streamed)
    assert len({p["messages"][0]["content"].split()[0] for p in streamed}) == len(streamed)  # unique prefixes

    json_path = write_json(result, tmp_path / "bench.json")
    data = json.loads(json_path.read_text())
    row = data["cells"][0]
    for key in ("mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
                "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms",
                "request_throughput", "output_throughput", "total_token_throughput", "duration",
                "completed", "failed", "total_input_tokens", "total_output_tokens", "context", "concurrency"):
        assert key in row, key
    assert load_cells(json_path) == data["cells"]
    single, best = best_cells(data["cells"])
    assert single["concurrency"] == 1
    assert best["output_throughput"] == max(c["output_throughput"] for c in data["cells"])

    png = write_plots(result, tmp_path / "bench.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(png)
    assert image.shape[0] == 450 and image.shape[1] == 1200 and image.shape[2] in (3, 4)

    table = results_table(result)
    assert "out tok/s" in table.columns and "TTFT p99" in table.columns and "calibrated" in table.caption


def test_cli_bench_writes_outputs(fast_server: SyntheticVllm, tmp_path: Path) -> None:
    from bot.cli import app

    json_path, png_path = tmp_path / "out.json", tmp_path / "out.png"
    result = CliRunner().invoke(app, [
        "bench", "--base-url", fast_server.base_url, "--model", MODEL, "--concurrency", "1,2", "--context", "64",
        "--output-len", "9", "--requests-per-cell", "4", "--save", str(json_path), "--plot", str(png_path),
    ], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "out tok/s" in result.output and "…" not in result.output
    assert [c["concurrency"] for c in load_cells(json_path)] == [1, 2]
    assert png_path.read_bytes()[:4] == b"\x89PNG"
    # every cell figure is printed whole at 80 columns (records layout), the same as in the JSON
    saved = json.loads(json_path.read_text())
    for cell in saved["cells"]:
        assert f"{cell['output_throughput']:.1f}" in result.output

    as_json = CliRunner().invoke(app, [
        "bench", "--base-url", fast_server.base_url, "--model", MODEL, "--concurrency", "1", "--context", "64",
        "--output-len", "9", "--requests-per-cell", "4", "--json",
    ])
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    assert [c["concurrency"] for c in document["cells"]] == [1] and document["model_id"] == MODEL


def test_cli_bench_stops_after_the_first_failed_probe(tmp_path: Path) -> None:
    """An endpoint that does not answer: one line and exit 1, not a sweep of 0.0 rows."""
    import socket

    from bot.cli import app

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # closed again: nothing listens there
    result = CliRunner().invoke(app, ["bench", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", MODEL])
    assert result.exit_code == 1
    assert "bench stopped:" in result.output and "did not answer the first probe" in result.output
    assert "out tok/s" not in result.output and "0.0" not in result.stdout
    assert len(result.output.strip().splitlines()) == 1, result.output  # one line, no empty progress bar
