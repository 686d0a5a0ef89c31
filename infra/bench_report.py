"""Presenting a benchmark sweep: a table of text rows, a JSON file with vLLM's key names, PNG charts,
and reading a saved JSON back (for `tpubot cost --bench`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.bench import SweepResult, percentile_key


@dataclass(frozen=True)
class ResultsTable:
    """The sweep as rows of text; the CLI lays it out (bot/cli/output.py) without cutting a value."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str


def results_table(result: SweepResult) -> ResultsTable:
    p = percentile_key(result.config.percentiles[-1])
    estimate = result.estimate
    caption = (
        f"prompt length: {'calibrated' if estimate.calibrated else 'estimated'} "
        f"{estimate.tokens_per_word:.2f} tokens/word + {estimate.overhead_tokens:.0f}; "
        f"'prompt tok' is the server's usage.prompt_tokens. Times in ms, vllm bench serve definitions."
    )
    columns = ["context", "conc", "ok", "fail", "prompt tok", "req/s", "out tok/s", "total tok/s",
               "TTFT mean", f"TTFT {p}", "TPOT mean", f"TPOT {p}", "ITL mean", f"ITL {p}", "E2EL mean", f"E2EL {p}"]
    rows = []
    for cell in result.cells:
        m = cell.metrics
        rows.append([
            str(cell.context), str(cell.concurrency), str(m["completed"]), str(m["failed"]),
            f"{cell.mean_prompt_tokens:.0f}",
            f"{m['request_throughput']:.2f}", f"{m['output_throughput']:.1f}", f"{m['total_token_throughput']:.0f}",
            f"{m['mean_ttft_ms']:.1f}", f"{m[f'{p}_ttft_ms']:.1f}",
            f"{m['mean_tpot_ms']:.2f}", f"{m[f'{p}_tpot_ms']:.2f}",
            f"{m['mean_itl_ms']:.2f}", f"{m[f'{p}_itl_ms']:.2f}",
            f"{m['mean_e2el_ms']:.0f}", f"{m[f'{p}_e2el_ms']:.0f}",
        ])
    return ResultsTable(f"bench {result.config.base_url} ({result.config.model})", columns, rows, caption)


def failure_lines(result: SweepResult) -> list[str]:
    return [f"context {c.context} × concurrency {c.concurrency}: {err}" for c in result.cells for err in c.errors]


def write_json(result: SweepResult, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.as_dict(), indent=2) + "\n", encoding="utf-8")
    return path


def load_cells(path: str | Path) -> list[dict[str, Any]]:
    """The per-cell rows of a JSON written by `write_json`."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        raise ValueError(f"{path} is not a tpubot bench JSON (no 'cells' list)")
    return cells


def best_cells(cells: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the best concurrency-1 cell, the best cell overall) by output token throughput."""
    measured = [c for c in cells if c.get("completed") and c.get("output_throughput", 0) > 0]
    single = [c for c in measured if c.get("concurrency") == 1]
    pick = lambda rows: max(rows, key=lambda c: c["output_throughput"]) if rows else None  # noqa: E731
    return pick(single), pick(measured)


def write_plots(result: SweepResult, path: str | Path) -> Path:
    """One PNG, two charts: output throughput vs context (a line per concurrency) and
    TTFT p99 vs concurrency (a line per context)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in CI
    import matplotlib.pyplot as plt

    p = percentile_key(result.config.percentiles[-1])
    contexts = sorted({c.context for c in result.cells})
    concurrencies = sorted({c.concurrency for c in result.cells})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    try:
        for concurrency in concurrencies:
            xs = [c.context for c in result.cells if c.concurrency == concurrency]
            ys = [c.metrics["output_throughput"] for c in result.cells if c.concurrency == concurrency]
            left.plot(xs, ys, marker="o", label=f"concurrency {concurrency}")
        _ticks_at(left, contexts, base=10)
        left.set_ylim(bottom=0)
        left.set_xlabel("context (prompt tokens)")
        left.set_ylabel("output throughput (tok/s)")
        left.set_title("Output throughput vs context")
        left.grid(True, alpha=0.3)
        left.legend()
        for context in contexts:
            xs = [c.concurrency for c in result.cells if c.context == context]
            ys = [c.metrics[f"{p}_ttft_ms"] for c in result.cells if c.context == context]
            right.plot(xs, ys, marker="o", label=f"context {context}")
        _ticks_at(right, concurrencies, base=2)
        right.set_ylim(bottom=0)
        right.set_xlabel("concurrency")
        right.set_ylabel(f"TTFT {p} (ms)")
        right.set_title(f"TTFT {p} vs concurrency")
        right.grid(True, alpha=0.3)
        right.legend()
        fig.suptitle(f"{result.config.model} @ {result.config.base_url}")
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path


def _ticks_at(axis: Any, values: list[int], base: int) -> None:
    """Log x axis labelled with the swept values themselves (128, 1024, …), not powers."""
    from matplotlib.ticker import NullLocator

    axis.set_xscale("log", base=base)
    axis.set_xticks(values)
    axis.set_xticklabels([f"{v:,}" for v in values])
    axis.xaxis.set_minor_locator(NullLocator())
