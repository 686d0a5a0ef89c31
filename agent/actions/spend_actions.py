"""budget, set_budget, spend and spend_chart: the spend guardrails' actions (issue 21).

Budgets are USD per calendar month (UTC), per channel and per workspace; `/tpu up` is refused when
its worst case would overrun either (agent/lease/budget.py). Reading is for everyone the read
rules allow; setting is an admin action, so a model can never change a budget.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.actions.run_context import RunContext
from agent.actions.registry import ActionKind, ActionResult, action
from agent.context import ChannelDeps, SpendDeps
from agent.lease import budget
from infra.jobs import JobSpec
from infra.mrkdwn import in_code
from infra.state.spend import month_of

MONTH_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
CHANNEL_ID_RE = re.compile(r"^[CG][A-Z0-9]{2,}$")


@dataclass(frozen=True)
class SpendChartJob:
    team: str
    channel: str
    month: str  # YYYY-MM
    user_id: str = ""


SPEND_CHART_JOB = JobSpec("post_spend_chart", SpendChartJob)


def _channel_id(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    link = re.fullmatch(r"<#([CG][A-Z0-9]+)(?:\|[^<>]*)?>", text)
    if link:
        return link.group(1)
    if CHANNEL_ID_RE.fullmatch(text):
        return text
    if text.startswith("#"):
        raise ValueError(f"Slack sent `{in_code(text[:40])}` as plain text, so its channel id is unknown; pick the channel "
                         "from the autocomplete (it arrives as a link) or give its id, like C0123ABCD")
    raise ValueError(f"`{in_code(text[:40])}` is not a channel; give #channel or a channel id like C0123ABCD")


ChannelId = Annotated[str | None, AfterValidator(_channel_id)]


class ChannelArg(BaseModel):
    model_config = ConfigDict(extra="forbid")

    channel: ChannelId = Field(None, description="a channel id (C…) or <#C…> link; omit for this channel")


class SetBudgetArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    usd: float | None = Field(None, ge=0, le=1_000_000, description="the monthly budget in USD (0 or more)")
    clear: bool = Field(False, description="true: remove the admin-set budget (the settings' default applies again)")
    channel: ChannelId = Field(None, description="a channel id (C…) or <#C…> link; omit for the workspace's budget")

    @model_validator(mode="after")
    def _one_of(self) -> "SetBudgetArgs":
        if self.clear == (self.usd is not None):
            raise ValueError("give either usd (the new monthly budget) or clear=true")
        return self


class SpendArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    month: str | None = Field(None, description="calendar month as YYYY-MM (UTC); omit for this month")

    @field_validator("month")
    @classmethod
    def _month(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not MONTH_RE.match(value):
            raise ValueError(f"`{in_code(value[:20])}` is not a month; write it as YYYY-MM, like {month_of(time.time())}")
        return value


def _limit_text(usd: float | None, source: str) -> str:
    if usd is None:
        return "no limit"
    return budget.money(usd) + (" (default from settings)" if source == "default" else "")


def _set_channel_lines(limits: dict[str, float], shown: str) -> list[str]:
    others = [f"<#{c}> {budget.money(usd)}" for c, usd in sorted(limits.items()) if c != shown]
    return [f"• Other channels with their own budget: {', '.join(others)}."] if others else []


@action("budget", "Show the monthly spend budgets (USD, calendar month UTC) of this channel and of the workspace, "
        "with what was spent and what running TPUs hold against them.", ChannelArg, kind=ActionKind.READ)
async def show_budget(svc: SpendDeps, run: RunContext, args: ChannelArg) -> ActionResult:
    channel = args.channel or run.actor.channel
    now = time.time()
    month = month_of(now)
    limits = await svc.spend.limits(run.actor.team, channel)
    ledger = await svc.spend.month(run.actor.team, month)
    report = await budget.month_spend(svc, run.actor.team, month, now)
    mine = next((row for row in report.channels if row.channel == channel), None)
    ch_spent = mine.cost if mine else 0.0
    ch_reserved = ledger.channel_reserved.get(channel, 0.0)
    # Spent so far counts the running TPUs' cost to now, so "held" is what they may still cost: the
    # two add up to what the budget check counts (settled + reserved).
    ch_held = max(0.0, ch_reserved - (mine.running_cost if mine else 0.0))
    ws_held = max(0.0, ledger.reserved - sum(row.running_cost for row in report.channels))
    data = {"month": month, "channel": channel,
            "channel_budget_usd": limits.channel, "channel_budget_source": limits.channel_source,
            "workspace_budget_usd": limits.workspace, "workspace_budget_source": limits.workspace_source,
            "channel_spent_usd": ch_spent, "channel_reserved_usd": ch_reserved,
            "workspace_spent_usd": report.cost, "workspace_reserved_usd": ledger.reserved}
    lines = [f"*Budgets for {month}* (USD, calendar month UTC):",
             f"• <#{channel}>: {_limit_text(limits.channel, limits.channel_source)}; {budget.money(ch_spent)} spent so "
             f"far, {budget.money(ch_held)} more held by running TPUs (what they may still cost to their deadlines).",
             f"• Workspace: {_limit_text(limits.workspace, limits.workspace_source)}; {budget.money(report.cost)} spent "
             f"so far, {budget.money(ws_held)} more held by running TPUs.",
             *_set_channel_lines(await svc.spend.channel_limits(run.actor.team), channel),
             "Admins change them with `/tpu budget set 200` (the workspace) or `/tpu budget set 50 #channel`, and "
             "`/tpu budget clear [#channel]`."]
    return ActionResult.done("\n".join(lines), data)


@action("set_budget", "Set or clear a monthly spend budget in USD, for the workspace or one channel (admins only).",
        SetBudgetArgs, kind=ActionKind.ADMIN)
async def set_budget(svc: SpendDeps, run: RunContext, args: SetBudgetArgs) -> ActionResult:
    channel = args.channel
    whose = "The workspace's" if channel is None else f"<#{channel}>'s"
    if args.clear:
        removed = await svc.spend.clear_limit(run.actor.team, channel=channel)
        limits = await svc.spend.limits(run.actor.team, channel or "")
        now_in_force = limits.workspace if channel is None else limits.channel
        after = (f"the settings' default of {budget.money(now_in_force)} applies" if now_in_force is not None
                 else "no limit applies")
        text = (f"{whose} admin-set monthly budget is cleared; {after}." if removed
                else f"{whose} monthly budget was not set by an admin; nothing changed ({after}).")
        return ActionResult.done(text, {"channel": channel, "cleared": removed, "budget_usd": now_in_force})
    assert args.usd is not None, "SetBudgetArgs holds usd unless clear"
    await svc.spend.set_limit(run.actor.team, args.usd, channel=channel)
    month = month_of(time.time())
    text = (f"{whose} monthly budget is now {budget.money(args.usd)} (from {month}, UTC months). `/tpu up` is "
            "refused when its worst case would go over it.")
    return ActionResult.done(text, {"channel": channel, "budget_usd": args.usd, "month": month})


def spend_table(report: budget.MonthSpend, names: dict[str, str] | None = None) -> str:
    """Fixed-width, nothing cut: the channel column is as wide as its longest name, figures are
    formatted to fit theirs. `names`: channel id → name (`#tpu-ml`); a channel without one shows its id."""
    shown = {row.channel: (f"#{names[row.channel]}" if names and names.get(row.channel) else row.channel)
             for row in report.channels}
    width = max([12, *(len(name) for name in shown.values())])
    head = f"{'channel':<{width}} {'leases':>6} {'TPU h':>7} {'USD':>9} {'$/M out':>8} {'idle h':>7} {'budget':>9}"
    rows = [head]
    for row in report.channels:
        per_m = row.usd_per_million_output_tokens
        rows.append(f"{shown[row.channel]:<{width}} {row.leases:>6} {row.tpu_seconds / 3600:>7.2f} {row.cost:>9.2f} "
                    f"{(f'{per_m:.3f}' if per_m is not None else '—'):>8} {row.idle_seconds / 3600:>7.2f} "
                    f"{(f'{row.limit:.2f}' if row.limit is not None else '—'):>9}")
    total_hours = sum(row.tpu_seconds for row in report.channels) / 3600
    total_idle = sum(row.idle_seconds for row in report.channels) / 3600
    leases = sum(row.leases for row in report.channels)
    limit = f"{report.workspace_limit:.2f}" if report.workspace_limit is not None else "—"
    rows.append(f"{'all':<{width}} {leases:>6} {total_hours:>7.2f} {report.cost:>9.2f} {'':>8} {total_idle:>7.2f} "
                f"{limit:>9}")
    return "\n".join(rows)


@action("spend", "Show a month's TPU spend per channel: leases, TPU hours, dollars, $ per million output tokens "
        "and idle hours (the model READY with no traffic).", SpendArgs, kind=ActionKind.READ)
async def spend(svc: SpendDeps, run: RunContext, args: SpendArgs) -> ActionResult:
    month = args.month or month_of(time.time())
    report = await budget.month_spend(svc, run.actor.team, month)
    if not report.channels:
        return ActionResult.done(f"No TPU spend in {month} in this workspace.", report.as_dict(), report)
    running = sum(row.running for row in report.channels)
    idle = sum(row.idle_seconds for row in report.channels) / 3600
    # A code block shows `<#C…>` as typed, so the table names channels itself.
    names = {row.channel: name for row in report.channels if (name := await svc.directory.channel_name(row.channel))}
    text = (f"*TPU spend in {month}* (USD; running TPUs counted so far"
            f"{f', {running} still running' if running else ''}):\n```{spend_table(report, names)}```\n"
            f"Idle hours are the model READY with no traffic: {idle:.2f} h this month, the waste to cut. "
            "`/tpu spend chart` posts this as a bar chart.")
    return ActionResult.done(text, report.as_dict(), report)


# Read: it changes no TPU and no budget; it only posts a chart of figures the reader may see anyway.
@action("spend_chart", "Post a PNG bar chart of a month's TPU spend per channel in this channel.", SpendArgs,
        kind=ActionKind.READ)
async def spend_chart(svc: ChannelDeps, run: RunContext, args: SpendArgs) -> ActionResult:
    month = args.month or month_of(time.time())
    # One chart per channel, month and minute: a double-click queues nothing new.
    job_id = f"spend-chart:{run.actor.team}:{run.actor.channel}:{month}:{int(time.time() // 60)}"
    queued = await svc.jobs.enqueue(SPEND_CHART_JOB, SpendChartJob(team=run.actor.team, channel=run.actor.channel,
                                                                   month=month, user_id=run.actor.user_id),
                                    job_id=job_id)
    if not queued:
        return ActionResult.refused(f"A {month} spend chart for this channel was just queued; it will appear here.",
                                    {"queued": False, "month": month})
    return ActionResult.done(f"Drawing the {month} spend chart; it will be posted in this channel.",
                             {"queued": True, "month": month})
