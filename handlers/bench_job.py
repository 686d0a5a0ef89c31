"""The `/tpu bench` worker job: a small sweep against the channel's READY endpoint, the chart
uploaded to the lease's card thread, the table posted under it, the cells saved for `/tpu cost`."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.actions.bench_actions import BenchJob
from agent.context import LeaseDeps
from infra.bench import EndpointNotAnswering, SweepConfig, SweepResult, run_sweep
from infra.bench_report import best_cells, write_plots
from infra.jobs import JobOutcome
from infra.state.leases import LeaseState

log = logging.getLogger(__name__)

# Small and bounded: 2 contexts × 2 concurrencies × 4 requests of 32 tokens, about a minute on a v5e.
CONCURRENCIES = (1, 4)
CONTEXTS = (128, 1024)
OUTPUT_LEN = 32
REQUESTS_PER_CELL = 4
REQUEST_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 10.0
SWEEP_TIMEOUT_S = 240.0  # the whole sweep; inside the worker's default 5-minute job timeout


def sweep_config(endpoint: str, model: str, api_key: str | None = None) -> SweepConfig:
    return SweepConfig(base_url=endpoint, model=model, api_key=api_key, concurrencies=CONCURRENCIES, contexts=CONTEXTS,
                       output_len=OUTPUT_LEN, requests_per_cell=REQUESTS_PER_CELL,
                       request_timeout_s=REQUEST_TIMEOUT_S, connect_timeout_s=CONNECT_TIMEOUT_S)


async def bench_endpoint(svc: LeaseDeps, client: AsyncWebClient, job: BenchJob) -> JobOutcome:
    lease = await svc.leases.get(job.team, job.channel)
    # Re-read: the model may have gone away (or the lease been replaced) since the ack.
    if lease is None or lease.lease_id != job.lease_id or lease.state != LeaseState.READY or not lease.endpoint:
        return JobOutcome.skipped("not-ready", bare=True)
    where: dict[str, Any] = {"channel": lease.card_channel or job.channel}
    if lease.card_ts:
        where["thread_ts"] = lease.card_ts
    from agent.lease.model_boot import lease_api_key

    config = sweep_config(lease.endpoint, svc.policy.model_name, await lease_api_key(svc, lease))
    try:
        result = await asyncio.wait_for(run_sweep(config), timeout=SWEEP_TIMEOUT_S)
    except asyncio.TimeoutError:
        await client.chat_postMessage(**where, text=f":warning: The benchmark of `{lease.endpoint}` did not finish "
                                                    f"within {SWEEP_TIMEOUT_S / 60:g} minutes; nothing was saved.")
        return JobOutcome.failed("timeout", bare=True)
    except EndpointNotAnswering as error:
        await client.chat_postMessage(**where, text=f":warning: The benchmark stopped: {error}.")
        return JobOutcome.failed("unreachable", bare=True)
    cells = [cell.as_dict() for cell in result.cells]
    if best_cells(cells)[1] is not None:
        # A sweep where everything failed must not replace an earlier good measurement.
        await svc.alerting.bench.save(job.team, job.channel, cells)
    # A chart Slack refuses is said in the thread; the table still follows.
    await upload_chart(client, partial(write_plots, result), where, filename=f"bench-{job.lease_id}.png",
                       what="chart", title=f"tpubot bench, lease {job.lease_id}")
    await client.chat_postMessage(**where, text=results_text(result, job.user_id), unfurl_links=False, unfurl_media=False)
    return JobOutcome.ok()


async def upload_chart(client: AsyncWebClient, draw: Callable[[Path], Path], where: dict, *, filename: str,
                       what: str, **upload: Any) -> bool:
    """Draw a chart into `filename` and upload it `where` (a channel, and a thread_ts or not).
    False when Slack refuses it, said there with why (most often the files:write scope)."""
    with tempfile.TemporaryDirectory(prefix="tpubot-chart-") as tmp:
        # matplotlib is synchronous and CPU-bound: keep it off the worker's event loop.
        data = (await asyncio.to_thread(draw, Path(tmp) / filename)).read_bytes()
    try:
        await client.files_upload_v2(**where, file=data, filename=filename, **upload)
    except SlackApiError as error:
        log.warning("%s upload failed: %s", filename, error.response.get("error"))
        await client.chat_postMessage(**where, text=f":warning: Could not upload the {what} "
                                                    f"({error.response.get('error')}; the app needs files:write).")
        return False
    return True


def results_text(result: SweepResult, user_id: str = "") -> str:
    rows = [f"{'context':>7} {'conc':>4} {'ok':>3} {'fail':>4} {'out tok/s':>9} {'TTFT ms':>8} {'TPOT ms':>8} "
            f"{'E2EL ms':>8}"]
    for cell in result.cells:
        m = cell.metrics
        rows.append(f"{cell.context:>7} {cell.concurrency:>4} {m['completed']:>3} {m['failed']:>4} "
                    f"{m['output_throughput']:>9.1f} {m['mean_ttft_ms']:>8.1f} {m['mean_tpot_ms']:>8.2f} "
                    f"{m['mean_e2el_ms']:>8.0f}")
    single, best = best_cells([cell.as_dict() for cell in result.cells])
    asked = f" for <@{user_id}>" if user_id else ""
    lines = [f"*Benchmark{asked}* of `{result.config.base_url}` ({result.config.model}), "
             f"{result.config.output_len} output tokens per request, means (vllm bench serve definitions):",
             "```" + "\n".join(rows) + "```"]
    if best:
        lines.append(f"Best: {best['output_throughput']:.1f} output tok/s at concurrency {best['concurrency']}, "
                     f"context {best['context']}" + (f"; {single['output_throughput']:.1f} tok/s at concurrency 1."
                                                     if single else ".") + " `/tpu cost` shows $ per million output tokens.")
    else:
        lines.append(":warning: Every request failed, so nothing was saved for `/tpu cost`.")
    return "\n".join(lines)
