"""The `/tpu spend chart` worker job: the month's spend per channel drawn as a PNG and uploaded to
the channel that asked (the same files_upload_v2 path as the bench chart, handlers/bench_job.py)."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.actions.spend_actions import SpendChartJob
from agent.context import Services
from agent.lease import budget
from infra.jobs import JobOutcome
from infra.spend_chart import ChartBar, write_spend_chart

log = logging.getLogger(__name__)


def chart_bars(report: budget.MonthSpend) -> list[ChartBar]:
    """One bar per channel; the idle share of its cost is its idle hours' share of its TPU hours."""
    bars = []
    for row in report.channels:
        idle_share = min(1.0, row.idle_seconds / row.tpu_seconds) if row.tpu_seconds else 0.0
        bars.append(ChartBar(label=f"#{row.channel}", usd=row.cost, idle_usd=row.cost * idle_share,
                             budget_usd=row.limit))
    return bars


async def render_chart(report: budget.MonthSpend, directory: Path) -> Path:
    # matplotlib is synchronous and CPU-bound: keep it off the worker's event loop.
    return await asyncio.to_thread(write_spend_chart, report.month, chart_bars(report),
                                   directory / f"spend-{report.month}.png")


async def post_spend_chart(svc: Services, client: AsyncWebClient, job: SpendChartJob) -> JobOutcome:
    report = await budget.month_spend(svc, job.team, job.month)
    if not report.channels:
        await client.chat_postMessage(channel=job.channel,
                                      text=f"No TPU spend in {job.month} in this workspace, so no chart.")
        return JobOutcome.ok("empty")  # it said so in the channel
    with tempfile.TemporaryDirectory(prefix="tpubot-spend-") as tmp:
        data = (await render_chart(report, Path(tmp))).read_bytes()
    asked = f" for <@{job.user_id}>" if job.user_id else ""
    try:
        await client.files_upload_v2(channel=job.channel, file=data, filename=f"spend-{job.month}.png",
                                     title=f"TPU spend per channel, {job.month}",
                                     initial_comment=f"TPU spend in {job.month}{asked}: {budget.money(report.cost)} in "
                                                     f"{len(report.channels)} channel"
                                                     f"{'s' * (len(report.channels) != 1)}.")
    except SlackApiError as error:
        log.warning("spend chart upload failed: %s", error.response.get("error"))
        await client.chat_postMessage(channel=job.channel, text=f":warning: Could not upload the spend chart "
                                                            f"({error.response.get('error')}; the app needs files:write).")
        return JobOutcome.failed("upload failed", bare=True)
    return JobOutcome.ok()
