"""Expiry: timers before a lease's deadline, the alert at it, and the one expiry path.

The lease's `deadline` (the flex-start maxRunDuration end) is the single source. When a lease
becomes ACTIVE, `ExpiryHook` enqueues one timer job per lead time and one at the deadline.
Job ids name the lease *and* the deadline (`timer:{lease}:{deadline}:{kind}`), so enqueueing
twice (a second worker, the reconciler) is a no-op, and a timer for a replaced lease or a moved
deadline finds nothing to do when it fires.

At the deadline the cloud has already deleted the VM and left the QR SUSPENDED, which still
holds quota: `expire_lease` deletes the QR, posts the expiry alert and releases the lease. The
watcher calls the same function when it sees SUSPENDED first, so there is one alert either way.
A QR suspended before the deadline did not expire: the API's `stateInitiator` says whether the
service (a preemption, maintenance) or someone in the project did it, and the alert, the card and
the receipt say which (`how_it_ended`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from agent.lease import alerts, receipts
from agent.lease.alerts import ACK_DEADLINE, EXPIRY
from agent.context import Alert
from agent.lease.lifecycle import release_lease
from infra.jobs import JobOutcome, JobSpec
from infra.state.leases import Lease, LeaseState
from infra.tpu_errors import TpuError

if TYPE_CHECKING:
    from agent.context import AlertingDeps, WorkerLeaseDeps
    from infra.state.leases import LeaseChanges
    from infra.tpu import RunWindow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TimerJob:
    """One timer of a lease: `kind` (a warning or the expiry) for the deadline it was set for, due at `due`."""

    team: str
    channel: str
    lease_id: str
    kind: str
    deadline: float
    due: float


TIMER_JOB = JobSpec("fire_timer", TimerJob)
DEADLINE_TOLERANCE = 0.5  # seconds; a deadline that moved less than this is the same deadline
# A suspension seen this close to the deadline is the run-duration end: the watcher polls, and the
# cloud's clock and ours differ by seconds.
DEADLINE_SLACK_SECONDS = 120.0
SUSPENDED_BY = {"SERVICE": "Google Cloud", "USER": "a user of the project"}


def warning_kind(lead_seconds: float) -> str:
    return f"warn-{int(lead_seconds)}"


def timer_job_id(lease_id: str, deadline: float, kind: str) -> str:
    return f"timer:{lease_id}:{int(deadline)}:{kind}"


def planned_timers(svc: "AlertingDeps", lease: Lease) -> list[tuple[str, float]]:
    """(kind, when) for every timer this lease should have: warnings after ACTIVE, then expiry."""
    if not lease.deadline:
        return []
    timers = []
    for lead in sorted(svc.alerting.policy.lead_times, reverse=True):
        when = lease.deadline - lead.total_seconds()
        if lease.active_at and when <= lease.active_at:
            continue  # a warning before the TPU even started says nothing
        timers.append((warning_kind(lead.total_seconds()), when))
    timers.append((EXPIRY, lease.deadline))
    return timers


async def schedule_timers(svc: "AlertingDeps", lease: Lease, *, now: float | None = None,
                          skip_past_warnings: bool = True) -> list[str]:
    """Enqueue the lease's timers; returns the ids this call queued (existing ones are no-ops).

    `skip_past_warnings`: a warning whose time has passed is not re-created (the reconciler
    cannot know whether it was posted before the state was lost; the expiry alert still comes).
    """
    now = now or time.time()
    queued = []
    for kind, when in planned_timers(svc, lease):
        if kind != EXPIRY and skip_past_warnings and when < now:
            continue
        job_id = timer_job_id(lease.lease_id, lease.deadline, kind)
        if await svc.jobs.enqueue(
            TIMER_JOB, TimerJob(team=lease.team, channel=lease.channel, lease_id=lease.lease_id, kind=kind,
                                deadline=lease.deadline, due=when),
            job_id=job_id, defer_until=datetime.fromtimestamp(when, tz=timezone.utc),
        ):
            queued.append(job_id)
    return queued


async def cloud_run_window(svc: "WorkerLeaseDeps", lease: Lease) -> "RunWindow | None":
    """The QR's run window as the cloud reports it (its termination time once ACTIVE), or None."""
    try:
        return await svc.tpu.aio.get_run_window(lease.zone, lease.qr_id)
    except TpuError as error:
        log.warning("run window of %s unavailable: %s", lease.qr_id, error)
        return None


def cloud_times(lease: Lease, window: "RunWindow | None") -> "LeaseChanges":
    """The deadline and the ACTIVE time by the cloud's own clock where they differ from what the
    watcher saw. The cloud counts the run from the real ACTIVE (terminationTime = ACTIVE +
    maxRunDuration); the watcher saw it up to a poll later, and a bill from that was short by as
    much. An ACTIVE time that would fall after the one seen, or before the lease was asked for, is a
    clock apart from ours, and the one seen is kept."""
    changes: LeaseChanges = {}
    if window is None or not window.termination_time:
        return changes
    started = window.termination_time - (window.max_run_seconds or lease.run_seconds)
    if lease.active_at and lease.created_at <= started < lease.active_at:
        changes["active_at"] = started  # with the deadline it implies: a bill is never longer than the run
        changes["deadline"] = window.termination_time
    elif abs(window.termination_time - lease.deadline) > DEADLINE_TOLERANCE:
        changes["deadline"] = window.termination_time
    return changes


class ExpiryHook:
    """On ACTIVE: align the deadline and the ACTIVE time with the cloud's, then schedule the timers."""

    async def on_active(self, svc: "WorkerLeaseDeps", lease: Lease) -> None:
        if changes := cloud_times(lease, await cloud_run_window(svc, lease)):
            lease = await svc.leases.update(lease, **changes) or lease
        await schedule_timers(svc, lease)

    async def on_released(self, svc: "AlertingDeps", lease: Lease, reason: str) -> None:
        return None  # fired timers re-read the lease and find it gone


# --- the timer job -------------------------------------------------------------------------


async def fire_timer(svc: "WorkerLeaseDeps", job: TimerJob) -> JobOutcome:
    lease = await svc.leases.get_by_id(job.team, job.channel, job.lease_id)
    if lease is None:
        return JobOutcome.skipped("lease gone")
    if abs(lease.deadline - job.deadline) > DEADLINE_TOLERANCE:
        return JobOutcome.skipped("deadline moved")
    if lease.state == LeaseState.TEARING_DOWN:
        return JobOutcome.skipped("tearing down")
    if job.kind == EXPIRY:
        return await expire_lease(svc, lease, cause="timer")
    return await warn(svc, lease, job.kind, job.due)


async def warn(svc: "AlertingDeps", lease: Lease, kind: str, due: float) -> JobOutcome:
    now = time.time()
    alerting = svc.alerting
    if now >= lease.deadline:
        return JobOutcome.skipped("past the deadline (the expiry alert covers it)")
    if any(ack.kind == ACK_DEADLINE for ack in await alerting.marks.acks(lease.lease_id)):
        return JobOutcome.skipped("acknowledged")
    left = lease.deadline - now
    cost = receipts.cost_so_far(alerting, svc.policy.accelerator_type, lease, now)
    late = alerts.late_by(alerting, due, now)
    alert = Alert(
        lease=lease, marker=kind, title=f"TPU in {lease.zone} expires in {alerts.span(left)}",
        body=(f"The flex-start TPU of this channel (`{lease.qr_id}`, lease `{lease.lease_id}`) is deleted by "
              f"Google Cloud at *{_clock(lease.deadline)}*. Save what you need; it cannot be extended."),
        mentions=await alerts.mentions_for(alerting, lease), ack_kind=ACK_DEADLINE, late_by=late,
        cost_so_far=cost,
    )
    posted = await alerts.post_once(alerting, alert)
    return (JobOutcome.ok(f"warned {kind}{' (late)' if late else ''}") if posted else
            JobOutcome.skipped("already posted"))


# --- the one expiry path ------------------------------------------------------------------


async def expire_lease(svc: "WorkerLeaseDeps", lease: Lease, *, cause: str, qr_state: str = "",
                       initiator: str = "") -> JobOutcome:
    """Delete the leftover QR, post the expiry alert once, release the lease (with its receipt).

    Called by the deadline timer and by the watcher when the QR turns SUSPENDED (`initiator`: the
    QR's `stateInitiator`); the timer passes no state, so it is read here. Raises `LockBusy` when
    another operation holds the channel (the caller retries), `LockLost` when it lost the lock
    part-way (the worker retries the job).
    """
    async with svc.locks.hold(lease.team, lease.channel) as lock:
        current = await svc.leases.get_by_id(lease.team, lease.channel, lease.lease_id)
        if current is None:
            return JobOutcome.skipped("already released")
        if current.state == LeaseState.TEARING_DOWN:
            return JobOutcome.skipped("tearing down")
        if not qr_state:
            qr_state, initiator = await _qr_state(svc, current)
        # SUSPENDED and FAILED QRs still hold quota; force-delete (already gone is fine).
        await svc.tpu.aio.delete_queued_resource(current.zone, current.qr_id)
        await lock.extend()  # the alert and the release only while the lease is still this job's
        now = time.time()
        title, reason, at_deadline = how_it_ended(current, now=now, qr_state=qr_state, initiator=initiator)
        if not at_deadline:
            log.warning("lease %s: %s %s; %s", current.lease_id, current.qr_id, qr_state or "gone", reason)
        late = alerts.late_by(svc.alerting, current.deadline, now) if at_deadline else 0.0
        cost = receipts.cost_so_far(svc.alerting, svc.policy.accelerator_type, current, now)
        await alerts.post_once(svc.alerting, Alert(
            lease=current, marker=EXPIRY, title=title,
            body=f"{reason}. The receipt is in the status card's thread; `/tpu up` starts a new one.",
            mentions=await alerts.mentions_for(svc.alerting, current), late_by=late, cost_so_far=cost,
        ))
        await release_lease(svc, current, reason=reason)
        await svc.audit.record(actor="tpubot", action="expire", team=current.team, channel=current.channel,
                               outcome=cause, detail=current.qr_id)
        return JobOutcome.ok(f"expired {current.qr_id} ({cause})")


async def _qr_state(svc: "WorkerLeaseDeps", lease: Lease) -> tuple[str, str]:
    """The QR's state and `stateInitiator` as the deadline timer finds them, so a suspension the
    watcher never saw (a worker down for hours) is told apart as well as the API allows: it gives
    who suspended a QR, not when. ("", "") when the API cannot be read: the deadline is still the
    deadline."""
    try:
        qr = await svc.tpu.aio.get_queued_resource(lease.zone, lease.qr_id)
    except TpuError as error:
        log.warning("state of %s unavailable at its deadline: %s", lease.qr_id, error)
        return "", ""
    return (qr.state, qr.state_initiator) if qr is not None else ("gone", "")


def how_it_ended(lease: Lease, *, now: float, qr_state: str = "", initiator: str = "") -> tuple[str, str, bool]:
    """(alert title, reason, at the deadline?) for a lease whose TPU is gone. Only a suspension at
    the run-duration end is an expiry; one before it says who suspended it, and how early.

    The service suspends a QR at its run-duration end, so a USER suspension is never the expiry,
    whenever the bot learns of it. The API gives no time of suspension: a SERVICE one (a preemption)
    the watcher missed reads as the expiry once the deadline has come."""
    if not lease.deadline:
        return (f"TPU in {lease.zone} ended",
                f"The TPU reached {qr_state or 'SUSPENDED'}; its queued resource was deleted", False)
    left = lease.deadline - now
    by_user = initiator == "USER" and qr_state in ("SUSPENDED", "SUSPENDING")
    if by_user and left <= DEADLINE_SLACK_SECONDS:
        return (f"TPU in {lease.zone} suspended before its deadline",
                f"Suspended by {SUSPENDED_BY['USER']} before its deadline ({_clock(lease.deadline)}; stateInitiator "
                f"USER; the API does not say when): someone deleted or suspended it outside the bot, not the "
                f"run-duration end; the bot deleted the leftover queued resource", False)
    if left <= DEADLINE_SLACK_SECONDS:
        return (f"TPU in {lease.zone} expired",
                f"Expired at {_clock(lease.deadline)}: the flex-start run time ended, Google Cloud deleted "
                f"the VM and the bot deleted the leftover queued resource", True)
    who = SUSPENDED_BY.get(initiator)
    why = {"SERVICE": "a preemption or a maintenance event, not the run-duration end",
           "USER": "someone deleted or suspended it outside the bot, not the run-duration end"}.get(
        initiator, "not the run-duration end")
    return (f"TPU in {lease.zone} suspended {alerts.span(left)} before its deadline",
            f"Suspended by {who or 'the cloud'} at {_clock(now)}, {alerts.span(left)} before its deadline "
            f"({_clock(lease.deadline)}; stateInitiator {initiator or 'not given'}): {why}; the bot deleted the "
            f"leftover queued resource", False)


def _clock(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

