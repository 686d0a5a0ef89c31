"""Spend guardrails: a lease's worst case checked against the budgets before it is claimed, its
cost settled into the month's ledger when it ends, 80 % / 100 % alerts, and the ledger rebuilt.

A flex-start TPU bills at most its run time (the cloud deletes the VM at maxRunDuration), so
the worst case of `/tpu up` is run hours × the highest rate among the zones it may land in ×
chips — known before anything is created. The check and the reservation are one atomic Redis
step with the lease claim (infra/state/spend.py). Costs use the receipt's arithmetic
(agent/lease/receipts.py): billed from ACTIVE, capped at the deadline, at the dated rate.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from agent.lease import receipts
from infra import prices
from infra.state.leases import Lease
from infra.state.spend import (
    BudgetedClaim, OpenReservation, Refusal, SpendRecord, month_bounds, month_of,
)

if TYPE_CHECKING:
    from agent.context import Actor, AlertingDeps, SpendDeps

log = logging.getLogger(__name__)

THRESHOLDS = (80, 100)  # percent of a budget; each alerts once per month and destination
ALERT_MARK_TTL = 40 * 86_400  # outlives the month
FIT_STEP_HOURS = 0.1  # the hours offered when a request does not fit are rounded down to this


# --- the worst case and the claim ---------------------------------------------------------------


def zone_rate(svc: "AlertingDeps", zone: str) -> float | None:
    """USD per hour of this deployment's slice in `zone` (rate × chips), None without a price."""
    price = receipts.price_for(svc.alerting, svc.policy.accelerator_type, zone)
    return price.usd_per_chip_hour * svc.alerting.policy.chips if price else None


async def searchable_zones(svc: "SpendDeps", team: str, channel: str) -> list[str]:
    """The zones a `/tpu up` without a zone may land in: every configured zone, except that under
    a budget only the zones with a price are searched (the worst case of a zone without one
    cannot be checked, and refusing every plain `/tpu up` over it would make the default zone
    list unusable with a budget). With no priced zone at all, every zone stays: the claim then
    refuses and says which prices to add."""
    zones = list(svc.policy.zones)
    limits = await svc.spend.limits(team, channel)
    if limits.workspace is None and limits.channel is None:
        return zones
    priced = [zone for zone in zones if zone_rate(svc, zone) is not None]
    return priced or zones


def worst_case_rate(svc: "AlertingDeps", zone: str, zone_explicit: bool,
                    searched: list[str] | None = None) -> float | None:
    """The highest hourly rate the lease can be billed at: its zone's, or any searched zone's
    (`searched`, by default every configured zone and the starting one). None when a zone it may
    land in has no price (then the worst case is unknown)."""
    if zone_explicit:
        zones = [zone]
    elif searched is not None:
        zones = searched
    else:
        zones = sorted(set(svc.policy.zones) | {zone})
    rates = [zone_rate(svc, z) for z in zones]
    known = [rate for rate in rates if rate is not None]
    if not rates or len(known) < len(rates):
        return None
    return max(known)


async def lease_worst_case(svc: "SpendDeps", lease: Lease) -> float:
    """A running lease's reservation: its whole run at its zone's rate once the zone is final,
    else at the highest rate of the zones its search may still land in (as its claim reserved)."""
    settled_zone = bool(lease.zone_explicit or lease.active_at or lease.queued_at)
    if settled_zone:
        rate = zone_rate(svc, lease.zone)
    else:
        rate = worst_case_rate(svc, lease.zone, False, await searchable_zones(svc, lease.team, lease.channel))
    return (rate or 0.0) * lease.run_seconds / 3600


async def claim(svc: "SpendDeps", actor: "Actor", *, zone: str, zone_explicit: bool, run_seconds: int) -> BudgetedClaim:
    searched = None if zone_explicit else await searchable_zones(svc, actor.team, actor.channel)
    if searched is not None and zone not in searched:
        zone = searched[0]  # the card starts where the search can go
    rate = worst_case_rate(svc, zone, zone_explicit, searched)
    worst = None if rate is None else rate * run_seconds / 3600
    return await svc.spend.claim_within_budget(
        team=actor.team, channel=actor.channel, holder=actor.user_id, zone=zone, run_seconds=run_seconds,
        zone_explicit=zone_explicit, worst_case_usd=worst,
        note={"rate": rate, "zone": zone, "holder": actor.user_id},
    )


money = prices.money  # the one way to write an amount (infra/prices.py)


def hours_that_fit(refusal: Refusal, rate: float) -> float:
    """The longest run (in FIT_STEP_HOURS steps) whose worst case fits both budgets."""
    if rate <= 0:
        return 0.0
    steps = math.floor(refusal.headroom() / rate / FIT_STEP_HOURS + 1e-9)
    return round(steps * FIT_STEP_HOURS, 1)


def refusal_text(svc: "AlertingDeps", refusal: Refusal, *, rate: float | None, hours: float, zone: str | None,
                 now: float | None = None) -> tuple[str, dict]:
    month = month_of(now or time.time())
    next_month = month_of(month_bounds(month)[1])
    if refusal.scope == "channel":
        limit, spent, held, whose = (refusal.channel_limit, refusal.channel_spent, refusal.channel_reserved,
                                     "this channel's")
    else:
        limit, spent, held, whose = (refusal.workspace_limit, refusal.workspace_spent, refusal.workspace_reserved,
                                     "the workspace's")
    data = {"budget_refused": refusal.scope, "month": month, "limit": limit, "spent": spent, "reserved": held,
            "need": refusal.need, "hours_that_fit": None}
    if rate is None or refusal.need is None:
        searched = [zone] if zone else sorted(set(svc.policy.zones))
        unpriced = [z for z in searched if zone_rate(svc, z) is None]
        priced = [z for z in sorted(set(svc.policy.zones)) if zone_rate(svc, z) is not None]
        instead = f", or name a priced zone (`/tpu up {priced[0]} {hours:g}h`)" if priced and not zone else ""
        return (f"Nothing was requested: {whose} {month} budget is {money(limit or 0)}, and a {hours:g} h TPU may "
                f"land in {', '.join(unpriced)}, which has no price in the table, so its worst case cannot be "
                f"checked. Add the price to PRICES in tpu.env{instead}."), data
    short = spent + held + refusal.need - (limit or 0)
    fit = hours_that_fit(refusal, rate)
    data["hours_that_fit"] = fit
    text = (f"Nothing was requested: a {hours:g} h TPU could cost up to {money(refusal.need)} ({hours:g} h × "
            f"{money(rate)}/h), and {whose} {month} budget is {money(limit or 0)} with {money(spent)} spent and "
            f"{money(held)} held by running TPUs, so it would go over by {money(short)}.")
    if fit >= FIT_STEP_HOURS:
        where = f"{zone} " if zone else ""
        text += f" `/tpu up {where}{fit:g}h` would fit."
    else:
        text += (f" No run fits until the budget resets on {next_month}-01 (UTC) or an admin raises it "
                 "(`/tpu budget set …`).")
    return text, data


# --- settling a lease's cost -------------------------------------------------------------------


async def spend_record(svc: "AlertingDeps", lease: Lease, now: float) -> SpendRecord:
    rate = zone_rate(svc, lease.zone)
    seconds = receipts.billed_seconds(lease, now)
    usage = await svc.alerting.usage.get(lease.lease_id)
    read = bool(usage and usage.metrics_at)
    return SpendRecord(
        lease_id=lease.lease_id, channel=lease.channel, holder=lease.holder, zone=lease.zone,
        started_at=lease.created_at, ended_at=now, billed_seconds=seconds,
        cost=prices.cost_for(rate, timedelta(seconds=seconds)) if rate is not None else 0.0,
        output_tokens=usage.output_tokens if usage and read else None, requests=usage.requests if usage and read else None,
        idle_seconds=usage.idle_total if usage else 0.0,
        usd_per_chip_hour=(rate / svc.alerting.policy.chips) if rate is not None and svc.alerting else None,
    )


async def settle_lease(svc: "SpendDeps", lease: Lease, now: float | None = None) -> bool:
    """The released lease's reservation becomes what it cost (once, however often this runs)."""
    now = now or time.time()
    month = month_of(lease.created_at or now)
    return await svc.spend.settle(lease.team, month, await spend_record(svc, lease, now))


class SpendHook:
    """Holds a running lease's worst case against the budgets once its zone is known, settles its
    cost when it is released, then checks the month's budget alerts."""

    async def on_active(self, svc: "SpendDeps", lease: Lease) -> None:
        # Claimed while its search could still land in an unpriced zone, it held nothing: now it can.
        await svc.spend.raise_reservation(lease.team, month_of(lease.created_at or time.time()), lease.lease_id,
                                          await lease_worst_case(svc, lease))

    async def on_released(self, svc: "SpendDeps", lease: Lease, reason: str) -> None:
        await settle_lease(svc, lease)
        await check_alerts(svc, lease.team, month_of(lease.created_at or time.time()))


# --- what was spent: settled plus running -------------------------------------------------------


@dataclass
class ChannelSpend:
    channel: str
    leases: int = 0
    running: int = 0
    tpu_seconds: float = 0.0
    cost: float = 0.0
    output_tokens: float = 0.0
    cost_with_tokens: float = 0.0  # the cost of the leases whose metrics were read
    idle_seconds: float = 0.0
    reserved: float = 0.0  # the running leases' worst case still held against the budget
    running_cost: float = 0.0  # what the running leases have cost so far (part of `cost` and of `reserved`)
    limit: float | None = None

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        return self.cost_with_tokens / self.output_tokens * 1_000_000 if self.output_tokens else None

    def as_dict(self) -> dict:
        return {"channel": self.channel, "leases": self.leases, "running": self.running,
                "tpu_hours": self.tpu_seconds / 3600, "usd": self.cost, "output_tokens": self.output_tokens,
                "usd_per_million_output_tokens": self.usd_per_million_output_tokens,
                "idle_hours": self.idle_seconds / 3600, "reserved_usd": self.reserved, "budget_usd": self.limit}


@dataclass
class MonthSpend:
    team: str
    month: str
    channels: list[ChannelSpend] = field(default_factory=list)
    workspace_limit: float | None = None
    at: float = 0.0

    @property
    def cost(self) -> float:
        return sum(row.cost for row in self.channels)

    def as_dict(self) -> dict:
        return {"team": self.team, "month": self.month, "usd": self.cost, "budget_usd": self.workspace_limit,
                "channels": [row.as_dict() for row in self.channels], "at": self.at}


async def month_spend(svc: "SpendDeps", team: str, month: str, now: float | None = None) -> MonthSpend:
    """Per channel: settled leases plus running ones as of now (cost so far, usage so far)."""
    now = now or time.time()
    ledger = await svc.spend.month(team, month)
    rows: dict[str, ChannelSpend] = {}

    def row(channel: str) -> ChannelSpend:
        return rows.setdefault(channel, ChannelSpend(channel))

    def add(record: SpendRecord, running: bool) -> None:
        r = row(record.channel)
        r.leases += 1
        r.running += int(running)
        r.tpu_seconds += record.billed_seconds
        r.cost += record.cost
        r.running_cost += record.cost if running else 0.0
        r.idle_seconds += record.idle_seconds
        if record.output_tokens:
            r.output_tokens += record.output_tokens
            r.cost_with_tokens += record.cost

    for record in ledger.settled.values():
        add(record, running=False)
    for held in ledger.open.values():
        row(held.channel).reserved += held.usd
        lease = await svc.leases.get(team, held.channel)
        if lease is not None and lease.lease_id == held.lease_id:
            add(await spend_record(svc, lease, now), running=True)
    limits = await svc.spend.limits(team, "")
    report = MonthSpend(team=team, month=month, workspace_limit=limits.workspace, at=now)
    for channel in sorted(rows):
        rows[channel].limit = (await svc.spend.limits(team, channel)).channel
        report.channels.append(rows[channel])
    return report


# --- alerts at 80 % and 100 % -------------------------------------------------------------------


async def check_alerts(svc: "SpendDeps", team: str, month: str, now: float | None = None) -> list[str]:
    """Post each crossed threshold once per month and destination; returns the markers posted."""
    alerting = svc.alerting
    report = await month_spend(svc, team, month, now)
    posted: list[str] = []
    subject = f"budget:{team}:{month}"
    for row in report.channels:
        if row.limit:
            for pct in crossed(row.cost, row.limit):
                text = alert_text(f"<#{row.channel}>", "its", row.cost, row.limit, pct, month)
                posted += await _post_once(alerting, subject, f"channel:{row.channel}:{pct}", text,
                                           channels=[row.channel])
    if report.workspace_limit:
        for pct in crossed(report.cost, report.workspace_limit):
            text = alert_text("This workspace", "its", report.cost, report.workspace_limit, pct, month)
            running = [row.channel for row in report.channels if row.running]
            posted += await _post_once(alerting, subject, f"workspace:{pct}", text, channels=running)
    return posted


def crossed(spent: float, limit: float) -> list[int]:
    return [pct for pct in THRESHOLDS if spent >= limit * pct / 100 - 1e-9]


def alert_text(who: str, its: str, spent: float, limit: float, pct: int, month: str) -> str:
    share = spent / limit * 100 if limit else 0
    if pct >= 100:
        return (f":octagonal_sign: {who} has used {its} whole {month} budget: {money(spent)} of {money(limit)} "
                f"({share:.0f}%). No new TPU fits until next month unless an admin raises it (`/tpu budget set …`).")
    return (f":moneybag: {who} has spent {money(spent)} of {its} {month} budget of {money(limit)} ({share:.0f}%, "
            f"past {pct}%). `/tpu spend` shows where it went.")


async def _post_once(alerting, subject: str, kind: str, text: str, *, channels: list[str]) -> list[str]:
    """One marker per destination (each channel, the admins), so a failed post retries only itself."""
    posted = []
    for destination in [*channels, "admins"]:
        marker = f"{kind}:{destination}"
        if not await alerting.marks.claim(subject, marker, ttl_seconds=ALERT_MARK_TTL):
            continue
        try:
            if destination == "admins":
                await alerting.sink.notify_admins(text)
            else:
                await alerting.sink.post_notice(destination, text)
        except BaseException:
            await alerting.marks.unclaim(subject, marker)
            raise
        posted.append(marker)
    return posted


async def check_running_alerts(svc: "SpendDeps", now: float | None = None) -> list[str]:
    """The periodic check: running leases accrue cost, so their months may cross a threshold."""
    months = {(lease.team, month_of(lease.created_at)) for lease in await svc.leases.all() if lease.active_at}
    posted: list[str] = []
    for team, month in sorted(months):
        posted += await check_alerts(svc, team, month, now)
    return posted


# --- rebuilding the ledger ----------------------------------------------------------------------


async def rebuild(svc: "SpendDeps", now: float | None = None) -> list[str]:
    """Every month's ledger again from the receipts stream and the leases still running (or still
    being released); returns `team/month` of each month rewritten."""
    now = now or time.time()
    settled: dict[tuple[str, str], dict[str, SpendRecord]] = defaultdict(dict)
    for team, month, record in await svc.spend.receipts():
        settled[(team, month)][record.lease_id] = record
    running: dict[tuple[str, str], list[OpenReservation]] = defaultdict(list)
    live = list(await svc.leases.all())
    live += [release.lease for release in await svc.leases.unfinished_releases(released_before=float("inf"))]
    for lease in live:
        month = month_of(lease.created_at or now)
        running[(lease.team, month)].append(OpenReservation(
            lease.lease_id, lease.channel, await lease_worst_case(svc, lease), lease.created_at or now,
            {"zone": lease.zone, "holder": lease.holder, "rebuilt": True}))
    rebuilt = []
    for team, month in sorted(set(settled) | set(running)):
        await svc.spend.rebuild_month(team, month, list(settled[(team, month)].values()), running[(team, month)],
                                      now=now)
        rebuilt.append(f"{team}/{month}")
    return rebuilt
