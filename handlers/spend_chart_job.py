"""The `/tpu spend chart` worker job: the month's spend per channel drawn as a PNG and uploaded to
the channel that asked (the same files_upload_v2 path as the bench chart, handlers/bench_job.py)."""

from __future__ import annotations

from functools import partial

from slack_sdk.web.async_client import AsyncWebClient

from agent.actions.spend_actions import SpendChartJob
from agent.context import SpendDeps
from agent.lease import budget
from handlers.bench_job import upload_chart
from infra.jobs import JobOutcome
from infra.spend_chart import ChartBar, write_spend_chart


def chart_bars(report: budget.MonthSpend) -> list[ChartBar]:
    """One bar per channel; the idle share of its cost is its idle hours' share of its TPU hours."""
    bars = []
    for row in report.channels:
        idle_share = min(1.0, row.idle_seconds / row.tpu_seconds) if row.tpu_seconds else 0.0
        bars.append(ChartBar(label=f"#{row.channel}", usd=row.cost, idle_usd=row.cost * idle_share,
                             budget_usd=row.limit))
    return bars


async def post_spend_chart(svc: SpendDeps, client: AsyncWebClient, job: SpendChartJob) -> JobOutcome:
    report = await budget.month_spend(svc, job.team, job.month)
    if not report.channels:
        await client.chat_postMessage(channel=job.channel,
                                      text=f"No TPU spend in {job.month} in this workspace, so no chart.")
        return JobOutcome.ok("empty")  # it said so in the channel
    asked = f" for <@{job.user_id}>" if job.user_id else ""
    chart = partial(write_spend_chart, report.month, chart_bars(report))
    if not await upload_chart(client, chart, {"channel": job.channel}, filename=f"spend-{job.month}.png", what="spend chart",
                              title=f"TPU spend per channel, {job.month}",
                              initial_comment=f"TPU spend in {job.month}{asked}: {budget.money(report.cost)} in "
                                              f"{len(report.channels)} channel{'s' * (len(report.channels) != 1)}."):
        return JobOutcome.failed("upload failed", bare=True)
    return JobOutcome.ok()
