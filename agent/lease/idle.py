"""The idle clock: read the endpoint's vLLM metrics every interval, and (when configured) warn
about, then tear down, a model nobody used for IDLE_TEARDOWN_MINUTES.

"Used" means requests running or waiting, or the request/token counters moved since the last
reading. A reading that fails (unreachable, not Prometheus, not vLLM) restarts the clock:
unknown never counts as idle. The readings also feed the cost receipt's usage figures.

Checks are a chain of deferred jobs whose ids are time slots (`idle:{lease}:{slot}`), so two
workers — or the reconciler re-arming a lost chain — enqueue the same next check once.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Literal

from agent.lease import alerts, receipts
from agent.lease.alerts import ACK_IDLE
from agent.context import Alert
from agent.lease.lifecycle import LeaseJob, enqueue_teardown, notify
from infra.jobs import JobOutcome, JobSpec
from infra.state.leases import Lease, LeaseState
from infra.vllm_metrics import read_usage

if TYPE_CHECKING:
    from agent.context import AlertingDeps, ChannelDeps

log = logging.getLogger(__name__)

IDLE_JOB = JobSpec("check_idle", LeaseJob)


def idle_job_id(lease_id: str, slot: int) -> str:
    return f"idle:{lease_id}:{slot}"


async def schedule_check(svc: "AlertingDeps", lease: Lease, *, after: float | None = None) -> bool:
    """Enqueue the next check in the slot after `after`; False if that slot is already queued."""
    interval = svc.alerting.policy.idle_check_interval.total_seconds()
    slot = int((after or time.time()) // interval) + 1
    return await svc.jobs.enqueue(IDLE_JOB, LeaseJob.of(lease), job_id=idle_job_id(lease.lease_id, slot),
                                  defer_until=datetime.fromtimestamp(slot * interval, tz=timezone.utc))


async def take_first_reading(svc: "ChannelDeps", lease: Lease) -> bool:
    """Read the metrics as soon as the model serves, not at the next slot (up to an interval away),
    so the card's idle clock has a figure from the start. Its own job id: at most once a lease;
    the check it runs then joins the chain's next slot like any other."""
    return await svc.jobs.enqueue(IDLE_JOB, LeaseJob.of(lease), job_id=f"idle:{lease.lease_id}:serving")


class IdleHook:
    async def on_active(self, svc: "AlertingDeps", lease: Lease) -> None:
        await schedule_check(svc, lease)

    async def on_released(self, svc: "AlertingDeps", lease: Lease, reason: str) -> None:
        return None  # the next check finds the lease gone and ends the chain


async def check_idle(svc: "AlertingDeps", job: LeaseJob) -> JobOutcome:
    lease = await svc.leases.get_by_id(job.team, job.channel, job.lease_id)
    if lease is None:
        return JobOutcome.stopped("lease gone")
    if not lease.state.holds_tpu:
        return JobOutcome.stopped(lease.state.value)
    alerting = svc.alerting
    now = time.time()
    timeout = max(0.5, min(5.0, alerting.policy.idle_check_interval.total_seconds()))
    reading = await read_usage(lease.endpoint, timeout=timeout)
    usage = await alerting.usage.record(job.lease_id, reading, now)
    idle = usage.idle_seconds(now)
    idle_since = usage.last_used_at if idle is not None else 0.0
    if abs(lease.idle_since - idle_since) > 0.5:
        lease = await svc.leases.update(lease, idle_since=idle_since) or lease
    outcome = "unknown" if idle is None else f"idle {idle:.0f}s"
    if idle is not None and alerting.policy.idle_teardown is not None:
        acked = any(ack.kind == ACK_IDLE for ack in await alerting.marks.acks(job.lease_id))
        if not acked:
            decided = await _warn_or_tear_down(svc, lease, idle, usage.last_used_at, now)
            if decided == "teardown":
                return JobOutcome.ok("idle teardown")
            outcome += f", {decided}" if decided else ""
    await schedule_check(svc, lease, after=now)
    return JobOutcome.ok(outcome)


IdleDecision = Literal["", "warned", "warned earlier", "teardown"]  # "": not idle long enough to warn


async def _warn_or_tear_down(svc: "AlertingDeps", lease: Lease, idle: float, idle_since: float,
                             now: float) -> IdleDecision:
    alerting = svc.alerting
    if alerting.policy.idle_teardown is None:  # the caller checks: no idle teardown configured
        return ""
    limit = alerting.policy.idle_teardown.total_seconds()
    warn_from = limit - alerting.policy.idle_warning_lead.total_seconds()
    if idle < warn_from:
        return ""
    # One warning per idle stretch: the marker names when the stretch began.
    marker = f"idle-{int(idle_since)}"
    warned_before = await alerting.marks.claimed(lease.lease_id, marker)
    if not warned_before:
        left = max(0.0, limit - idle)
        await alerts.post_once(alerting, Alert(
            lease=lease, marker=marker, title=f"Idle TPU in {lease.zone}: tear down in {alerts.span(left)}",
            body=(f"Nobody has used the model on `{lease.qr_id}` for {alerts.span(idle)}. Unless it gets a request, "
                  f"it is torn down after {alerts.span(limit)} idle. *Acknowledge* keeps it until its deadline."),
            mentions=await alerts.mentions_for(alerting, lease), ack_kind=ACK_IDLE,
            cost_so_far=receipts.cost_so_far(alerting, svc.policy.accelerator_type, lease, now),
        ))
        return "warned"
    if idle < limit:
        return "warned earlier"
    await tear_down_idle(svc, lease, idle)
    return "teardown"


async def tear_down_idle(svc: "AlertingDeps", lease: Lease, idle: float) -> bool:
    """Hand the lease to the teardown job (the same one `/tpu down` uses)."""
    note = f"Nobody used the model for {alerts.span(idle)}: torn down automatically (IDLE_TEARDOWN_MINUTES)"
    updated = await svc.leases.update(lease, state=LeaseState.TEARING_DOWN, torn_down_by="", detail=note)
    if updated is None:
        return False
    await enqueue_teardown(svc, updated)
    alerting = svc.alerting
    await alerts.post_once(alerting, Alert(
        lease=updated, marker="idle-teardown", title=f"Idle TPU in {lease.zone} is being torn down",
        body=f"{note}. The receipt follows in the status card's thread.",
        mentions=await alerts.mentions_for(alerting, updated),
        cost_so_far=receipts.cost_so_far(alerting, svc.policy.accelerator_type, updated),
    ))
    await notify(svc, updated)
    await svc.audit.record(actor="tpubot", action="idle_teardown", team=lease.team, channel=lease.channel,
                           outcome="requested", detail=lease.lease_id)
    return True

