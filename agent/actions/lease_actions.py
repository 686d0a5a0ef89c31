"""provision, teardown and status: the lease actions."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from agent.lease import lifecycle
from agent.lease.alerts import span
from agent.actions.run_context import RunContext
from agent.actions.registry import ActionKind, ActionResult, ActionStatus, Declined, action
from agent.context import Actor, ChannelDeps, LeaseDeps, Policy, SpendDeps, ZoneDeps
from infra.durations import check_lease_length
from infra.mrkdwn import in_code
from infra.state.conversations import Membership
from infra.state.leases import Lease


# The payloads a lease action's caller decides by (the `/tpu up` reply, the confirm card).
@dataclass(frozen=True)
class Requested:  # provision created this lease; under a budget it searches only `priced_zones_only`
    lease: Lease
    priced_zones_only: tuple[str, ...] = ()


@dataclass(frozen=True)
class AlreadyHeld:  # provision found the channel's TPU held: nothing new was created
    lease: Lease


@dataclass(frozen=True)
class ChannelLease:  # status: the channel's lease, None when it holds none
    lease: Lease | None


@dataclass(frozen=True)
class TeardownOf:  # teardown: the lease to confirm tearing down; None when refused (`text` says why)
    lease: Lease | None


class ProvisionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    zone: str | None = Field(None, description="GCP zone, e.g. us-west4-a; omit to search the configured zones, "
                                                "best-known first")
    hours: float | None = Field(None, description="how long the TPU runs, in hours: at least the deployment's "
                                                  "MIN_RUN_DURATION (10 minutes by default), at most 168 "
                                                  "(flex-start's 7 days)")

    @field_validator("zone")
    @classmethod
    def _configured_zone(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        value = value.strip().lower()
        policy: Policy | None = (info.context or {}).get("policy")
        if policy and value not in policy.zones:
            raise ValueError(f"`{in_code(value[:40])}` is not one of the configured zones ({', '.join(policy.zones)})")
        return value

    @field_validator("hours")
    @classmethod
    def _flex_start_hours(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is None:
            return None
        # The one bound check (infra/durations.py): /tpu up, the model's tool call and MCP all land here,
        # and what it returns is exactly what the budget prices and the queued resource asks for.
        # Without the deployment's policy (a first parse of the model's arguments) only the absolute bounds.
        policy = (info.context or {}).get("policy") or Policy(shortest_run=timedelta(seconds=1))
        return lease_hours(value, policy)


def lease_hours(hours: float, policy: Policy) -> float:
    """`hours` rounded down to the whole seconds a lease runs, or a ValueError naming the bounds."""
    length = check_lease_length(hours * 3600, shortest=policy.shortest_run, longest=policy.longest_run)
    return length.total_seconds() / 3600


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def lease_summary(lease: Any) -> dict:
    return {
        "lease_id": lease.lease_id, "state": lease.state.value, "zone": lease.zone, "holder": lease.holder,
        "queued_resource": lease.qr_id, "endpoint": lease.endpoint or None,
        "created_at": lease.created_at, "deadline": lease.deadline or None,
    }


@action("provision", "Request this channel's flex-start TPU v5e running Gemma (one per channel).",
        ProvisionArgs, kind=ActionKind.WRITE, destructive=False)
async def provision(svc: LeaseDeps, run: RunContext, args: ProvisionArgs) -> ActionResult:
    # A held channel is the common case in a burst (everyone types /tpu up at once): one read
    # answers it, before the doctor verdict and the zone choice that only a new lease needs.
    held = await svc.leases.get(run.actor.team, run.actor.channel)
    if held is not None:
        return already_held(held)
    unpostable = await cannot_post_reason(svc, run.actor)
    if unpostable:
        return ActionResult.refused(unpostable, {"not_in_channel": True}, Declined.NOT_IN_CHANNEL)
    # Both reads only matter for a new lease, and neither waits for the other.
    blocked, zone = await asyncio.gather(preflight_blockers(svc, args.zone), lifecycle.starting_zone(svc, args.zone))
    if blocked:
        fixes = "\n".join(f"• {check.name}: {check.detail}. Fix: {check.fix}" for check in blocked)
        return ActionResult.refused("The last `tpubot doctor` run found problems that would make `/tpu up` fail, so "
                                    f"nothing was requested:\n{fixes}\nFix them, run `tpubot doctor` again, then "
                                    "`/tpu up`.", {"preflight_failed": [check.name for check in blocked]},
                                    Declined.PREFLIGHT_FAILED)
    outcome = await lifecycle.request_provision(svc, run.actor, zone=zone, zone_explicit=args.zone is not None,
                                                hours=args.hours)
    if outcome.refusal is not None:
        return await budget_refused(svc, run.actor, outcome.refusal, args, zone)
    lease = outcome.lease
    assert lease is not None, "only a budget refusal comes without a lease"
    if not outcome.created:
        return already_held(lease)
    where = lease.zone if args.zone else f"{lease.zone} (searching the other configured zones if it refuses)"
    data = lease_summary(lease)
    priced_only: tuple[str, ...] = ()
    if not args.zone:
        from agent.lease import budget

        searched = await budget.searchable_zones(svc, run.actor.team, run.actor.channel)
        if len(searched) < len(svc.policy.zones):
            data["priced_zones_only"] = searched
            priced_only = tuple(searched)
            where = f"{lease.zone} ({PRICED_ZONES_ONLY.format(zones=', '.join(searched))})"
    return ActionResult.done(f"Requested a {svc.policy.accelerator_type} flex-start TPU in {where} "
                             f"(lease {lease.lease_id}).", data, Requested(lease, priced_only))


PRICED_ZONES_ONLY = ("under a budget only zones with a price are searched: {zones}; add prices to PRICES in tpu.env "
                     "to search more")


async def budget_refused(svc: SpendDeps, actor: Actor, refusal: Any, args: ProvisionArgs, zone: str) -> ActionResult:
    from agent.lease import budget

    hours = args.hours if args.hours is not None else svc.policy.max_run.total_seconds() / 3600
    searched = None if args.zone else await budget.searchable_zones(svc, actor.team, actor.channel)
    rate = budget.worst_case_rate(svc, zone, args.zone is not None, searched)
    text, data = budget.refusal_text(svc, refusal, rate=rate, hours=hours, zone=args.zone)
    return ActionResult.refused(text, data, Declined.BUDGET)


DM_CHANNEL = ("A TPU belongs to a channel, and this conversation is not one I can post its status card in. "
              "Run `/tpu up` in a channel (after `/invite @tpubot` there). Nothing was requested.")


async def cannot_post_reason(svc: LeaseDeps, actor: Actor) -> str:
    """Why the bot could not post this channel's status card ('' if it can, or cannot tell yet).

    Only Redis is read (nothing reaches Slack before the command's ack): direct messages are
    refused outright, a channel the bot was removed from by what Slack last said."""
    if actor.channel.startswith("D"):
        return DM_CHANNEL
    if await svc.membership.status(actor.team, actor.channel) == Membership.OUT:
        return lifecycle.NOT_IN_CHANNEL.format(channel=actor.channel) + " Nothing was requested."
    return ""


def already_held(lease: Lease) -> ActionResult:
    return ActionResult.refused(f"This channel's TPU is already held by <@{lease.holder}> (lease {lease.lease_id}, "
                                f"{lease.state.label}); nothing new was created.", lease_summary(lease),
                                AlreadyHeld(lease))


async def preflight_blockers(svc: ZoneDeps, zone: str | None) -> list:
    """Failed checks of the cached doctor verdict that apply to this request (quota was checked for one zone)."""
    failures = await svc.preflight.failures()
    if zone and zone != svc.policy.default_zone:
        failures = [check for check in failures if check.name != "tpu quota"]
    return failures


@action("teardown", "Tear down this channel's TPU; always asks a person to confirm.",
        NoArgs, kind=ActionKind.WRITE, destructive=True)
async def teardown(svc: ChannelDeps, run: RunContext, args: NoArgs) -> ActionResult:
    outcome = await lifecycle.request_teardown(svc, run.actor)
    if not outcome.ok or outcome.lease is None:
        return ActionResult.refused(outcome.message, payload=TeardownOf(None))
    return ActionResult(ActionStatus.NEEDS_CONFIRMATION, f"Confirm to tear down {outcome.lease.qr_id}.",
                        lease_summary(outcome.lease), TeardownOf(outcome.lease))


# A teardown card's confirm click (a person's, never a model's): the check the `teardown` action
# makes, then the teardown itself. The mention agent's proposals reach the lease through these.
request_teardown = lifecycle.request_teardown
confirm_teardown = lifecycle.confirm_teardown


@action("status", "Show this channel's TPU lease: state, zone, endpoint, deadline.", NoArgs)
async def status(svc: ChannelDeps, run: RunContext, args: NoArgs) -> ActionResult:
    lease = await svc.leases.get(run.actor.team, run.actor.channel)
    if lease is None:
        ended = await svc.leases.last_release(run.actor.team, run.actor.channel)
        if ended is None:
            return ActionResult.done("This channel holds no TPU.", {"lease": None}, ChannelLease(None))
        # How the last one ended answers "what happened to our TPU?": an expiry, a teardown, or a
        # suspension before the deadline (agent/lease/expiry.py says which).
        return ActionResult.done(f"This channel holds no TPU. Its last one (lease {ended.lease.lease_id} in "
                                 f"{ended.lease.zone}) ended {_ago(ended.at)}: {ended.reason}.",
                                 {"lease": None, "last_release": {"lease_id": ended.lease.lease_id,
                                                                  "zone": ended.lease.zone, "reason": ended.reason,
                                                                  "released_at": ended.at, "by": ended.by}},
                                 ChannelLease(None))
    return ActionResult.done(f"TPU {lease.state.label} in {lease.zone} (lease {lease.lease_id}).",
                             {"lease": lease_summary(lease)}, ChannelLease(lease))


def _ago(epoch: float) -> str:
    return f"{span(time.time() - epoch)} ago"
