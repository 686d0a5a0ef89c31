"""The lease lifecycle: claim → create the QR → follow it to ACTIVE → tear down → release.

This module is the request side (`request_provision`, `request_teardown`, `confirm_teardown`),
which runs in the web process inside Slack's 3-second ack window: it only touches Redis and
enqueues jobs, plus the helpers the job modules share. The jobs live in `provisioning`,
`watching` and `teardown`; each re-reads the lease before acting and is safe to run twice:
job ids are deterministic and every write is fenced by the lease id, and inside the channel
lock's `hold` by the lock's token too (infra/state/leases.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Unpack

from agent import access
from agent.lease import budget
from agent.context import Actor, ChannelDeps, ChannelUnreachable, LeaseDeps, SpendDeps, WorkerLeaseDeps, ZoneDeps
from agent.lease.zone_search import first_choice_zone
from agent.policy import Policy
from infra.jobs import JobSpec
from infra.state.leases import Lease, LeaseChanges, LeaseState, Release
from infra.state.locks import LockNotAcquired
from infra.state.spend import Refusal
from infra.tpu import QrState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseJob:
    """A job about one channel's lease (teardown, the idle check)."""

    team: str
    channel: str
    lease_id: str

    @classmethod
    def of(cls, lease: Lease) -> LeaseJob:
        return cls(team=lease.team, channel=lease.channel, lease_id=lease.lease_id)


@dataclass(frozen=True)
class ProvisionJob:
    team: str
    channel: str
    lease_id: str
    search_round: int = 0  # a zone search continues in later job runs


@dataclass(frozen=True)
class WatchJob:
    """A numbered look at a lease (the QR watcher, the model boot): `seq` makes each look's job id."""

    team: str
    channel: str
    lease_id: str
    seq: int


PROVISION_JOB = JobSpec("provision_lease", ProvisionJob)
WATCH_JOB = JobSpec("watch_lease", WatchJob)
# One try outlasts the teardown's own wait for the delete, so a QR that outlives the wait is released with
# the error on its card; with the worker's JOB_TIMEOUT (5m, the wait's length) the try was cut short instead.
TEARDOWN_JOB = JobSpec("teardown_lease", LeaseJob, timeout=Policy.teardown_wait + timedelta(minutes=1))



def provision_job_id(lease_id: str, search_round: int = 0) -> str:
    return f"provision:{lease_id}" + (f":{search_round}" if search_round else "")


# The channel's operation lock is held (ChannelLocks.hold raised it); the job should be retried shortly.
LockBusy = LockNotAcquired


LOCK_RETRY_SECONDS = 1.0
RELEASE_GRACE_SECONDS = 60.0  # a live release tells the channel and the hooks well within this


async def lock_retry_delay(svc: LeaseDeps, team: str, channel: str, attempt: int) -> float:
    """When a job that found the channel's lock busy (try number `attempt`) should try again.

    A live holder lets go within seconds (a teardown finishing as the next `/tpu up`'s
    provision job starts); a killed worker's lock goes when the heartbeat sweep finds it dead
    (~15-20 s, bot/orphaned_jobs.py), another killed holder's only by TTL. Doubling from 1 s serves all:
    the first retries come at once, and a few doublings reach the TTL, where short fixed
    retries would use up the job's tries before a dead holder's lock expires. Never later than
    the lock can last.
    """
    remaining = await svc.locks.remaining_seconds(team, channel)
    return min(remaining + 0.1, LOCK_RETRY_SECONDS * 2 ** max(0, attempt - 1))


@dataclass(frozen=True)
class ProvisionOutcome:
    created: bool
    lease: Lease | None  # None: refused by a budget
    refusal: "Refusal | None" = None


@dataclass(frozen=True)
class TeardownOutcome:
    ok: bool
    message: str
    lease: Lease | None = None


# --- request side (web process) ---------------------------------------------------------


async def request_provision(svc: SpendDeps, actor: Actor, *, zone: str, zone_explicit: bool,
                            hours: float | None) -> ProvisionOutcome:
    """Claim the channel's lease starting in `zone` (starting_zone) and queue its provision job.
    The claim is the atomic arbiter: on a held channel it returns the holder's lease; the same
    atomic step refuses a run whose worst case overruns a budget."""
    # `hours` passed ProvisionArgs' bound check (whole seconds); None is the deployment's default length.
    run_seconds = round(hours * 3600) if hours is not None else int(svc.policy.max_run.total_seconds())
    budgeted = await budget.claim(svc, actor, zone=zone, zone_explicit=zone_explicit, run_seconds=run_seconds)
    if budgeted.claim is None:
        return ProvisionOutcome(created=False, lease=None, refusal=budgeted.refusal)
    claim = budgeted.claim
    if claim.created:
        await svc.jobs.enqueue(
            PROVISION_JOB, ProvisionJob(team=actor.team, channel=actor.channel, lease_id=claim.lease.lease_id),
            job_id=provision_job_id(claim.lease.lease_id),
        )
    # The outcome is audited once, by run_action (who, what, where, ok/refused).
    return ProvisionOutcome(created=claim.created, lease=claim.lease)


async def starting_zone(svc: ZoneDeps, zone: str | None) -> str:
    """The zone asked for, else the one a zone search would try first: the card starts there."""
    if zone:
        return zone
    return await first_choice_zone(svc)


async def may_tear_down(svc: ChannelDeps, lease: Lease, user_id: str) -> bool:
    return user_id == lease.holder or await access.is_admin(svc.access, svc.directory, user_id)


async def request_teardown(svc: ChannelDeps, actor: Actor) -> TeardownOutcome:
    """Checks that there is something to tear down and that the actor may; the caller asks to confirm."""
    lease = await svc.leases.get(actor.team, actor.channel)
    if lease is None:
        return TeardownOutcome(False, "This channel holds no TPU, so there is nothing to tear down.")
    if not await may_tear_down(svc, lease, actor.user_id):
        return _not_the_holders(lease)
    if lease.state == LeaseState.TEARING_DOWN:
        return TeardownOutcome(False, "This channel's TPU is already being torn down.", lease)
    return TeardownOutcome(True, "confirm", lease)


async def confirm_teardown(svc: ChannelDeps, actor: Actor, lease_id: str) -> TeardownOutcome:
    # The clicker is checked, not whoever asked for the card: anyone in the channel can click.
    decision = await access.check(svc.access, svc.directory, actor, access.ActionKind.WRITE, "teardown")
    if not decision.allowed:
        await svc.audit.record(actor=actor.user_id, action="down", team=actor.team, channel=actor.channel,
                               outcome="denied", detail=decision.message)
        return TeardownOutcome(False, decision.message)
    lease = await svc.leases.get_by_id(actor.team, actor.channel, lease_id)
    if lease is not None and not await may_tear_down(svc, lease, actor.user_id):
        await svc.audit.record(actor=actor.user_id, action="down", team=actor.team, channel=actor.channel,
                               outcome="denied", detail=lease_id)
        return _not_the_holders(lease)
    updated = None if lease is None else await svc.leases.update(lease, state=LeaseState.TEARING_DOWN,
                                                                  torn_down_by=actor.user_id)
    if updated is None:
        return TeardownOutcome(False, "That TPU is already gone; nothing changed.")
    await enqueue_teardown(svc, updated)
    await svc.audit.record(actor=actor.user_id, action="down", team=actor.team, channel=actor.channel,
                           outcome="confirmed", detail=lease_id)
    # The card shows TEARING_DOWN from the teardown job's first step: a Slack call here would
    # hold the click's ack (chat.update retries 429s for seconds; Slack's limit is 3 s).
    return TeardownOutcome(True, "Tearing down…", updated)


def _not_the_holders(lease: Lease) -> TeardownOutcome:
    return TeardownOutcome(
        False, f"Only <@{lease.holder}> (the holder) or an admin can tear down this channel's TPU.", lease)


async def enqueue_teardown(svc: ChannelDeps, lease: Lease) -> None:
    """The teardown job `/tpu down` and the idle clock both hand a TEARING_DOWN lease to."""
    spec, job, job_id = _teardown_job(lease)
    await svc.jobs.enqueue(spec, job, job_id=job_id)


def _teardown_job(lease: Lease) -> tuple[JobSpec, LeaseJob, str]:
    return TEARDOWN_JOB, LeaseJob.of(lease), f"teardown:{lease.lease_id}"


# --- helpers ----------------------------------------------------------------------------


def lease_state_for(qr_state: QrState) -> LeaseState:
    try:
        return LeaseState(qr_state)
    except ValueError:
        # ACCEPTED is the older name of WAITING_FOR_RESOURCES; DELETING/SUSPENDING show as is.
        return LeaseState.WAITING_FOR_RESOURCES if qr_state == QrState.ACCEPTED else LeaseState.PROVISIONING


def explain(error) -> str:
    text = error.message
    if getattr(error, "fix", None):
        text += f" Fix: {error.fix}"
    return text


async def fail_lease(svc: LeaseDeps, lease: Lease, reason: str) -> None:
    failed = await change_lease(svc, lease, state=LeaseState.FAILED, detail=reason)
    if failed is not None:
        # The FAILED card stays as the record; hooks still learn the lease is gone.
        await release_lease(svc, failed, reason=reason, tell_channel=False)
    await svc.audit.record(actor="tpubot", action="provision", team=lease.team, channel=lease.channel,
                           outcome="failed", detail=reason)


async def release_lease(svc: LeaseDeps, lease: Lease, *, reason: str, by: str = "",
                        tell_channel: bool = True) -> bool:
    """Release (fenced), then tell the channel (unless not `tell_channel`) and every hook; False if
    someone else already did."""
    release = await svc.leases.release(lease, reason=reason, by=by, tell_channel=tell_channel)
    if release is None:
        return False
    await finish_release(svc, release)
    return True


async def finish_release(svc: LeaseDeps, release: Release) -> None:
    """Tell the channel and every hook of a release, then drop its note (infra/state/leases.py).

    Run again after a crash part-way, the card update repeats harmlessly and the hooks clear
    what is already clear; only the thread receipt can appear twice.
    """
    if release.tell_channel:
        await svc.observer.lease_released(release.lease, reason=release.reason, by=release.by)
    for hook in svc.hooks:
        await hook.on_released(svc, release.lease, release.reason)
    await svc.leases.release_finished(release.lease.lease_id)


async def finish_interrupted_releases(svc: LeaseDeps, *, now: float | None = None) -> int:
    """Finish releases a crash cut short. Young notes are left alone: their release may still be
    running in a live process, and telling the channel twice is worse than a minute's wait."""
    released_before = (now if now is not None else time.time()) - RELEASE_GRACE_SECONDS
    interrupted = await svc.leases.unfinished_releases(released_before=released_before)
    for release in interrupted:
        await finish_release(svc, release)
    return len(interrupted)


async def lease_became_active(svc: WorkerLeaseDeps, lease: Lease) -> None:
    for hook in svc.hooks:
        await hook.on_active(svc, lease)


async def change_lease(svc: ChannelDeps, lease: Lease, **changes: Unpack[LeaseChanges]) -> Lease | None:
    """Write `changes` (fenced, and inside `ChannelLocks.hold` with the lock's token: LeaseStore.update),
    then refresh the status card; None, with no card refresh, if the lease was replaced or released."""
    updated = await svc.leases.update(lease, **changes)
    return None if updated is None else await notify(svc, updated)


async def notify(svc: ChannelDeps, lease: Lease) -> Lease:
    """Refresh the status card. A channel the bot was removed from does not stop the lease: the
    holder was told by DM, and the TPU is still watched, expired and torn down as usual."""
    try:
        return await svc.observer.lease_changed(lease)
    except ChannelUnreachable as error:
        log.info("lease %s goes on without its card: %s", lease.lease_id, error)
        return lease


NOT_IN_CHANNEL = ("I'm not in <#{channel}>, so I can't post the status card of a TPU there. "
                  "Invite me with `/invite @tpubot` in <#{channel}>, then run `/tpu up` again.")


async def abandon_unpostable(svc: LeaseDeps, lease: Lease, error: ChannelUnreachable) -> None:
    """A lease whose channel cannot be posted to before anything was created: released (the
    channel is free for `/tpu up` after an invite), nothing left behind, the holder told by DM."""
    await release_lease(svc, lease, reason=f"Could not post in the channel ({error.reason})", tell_channel=False)
    await svc.observer.tell_holder(lease, ":warning: Your `/tpu up` did not go ahead: "
                                   + NOT_IN_CHANNEL.format(channel=lease.channel) + " Nothing was created.")
    await svc.audit.record(actor="tpubot", action="provision", team=lease.team, channel=lease.channel,
                           outcome="not_in_channel", detail=lease.lease_id)


async def schedule_watch(svc: ChannelDeps, lease: Lease, *, delay: timedelta) -> None:
    seq = lease.watch_seq + 1
    if await svc.leases.update(lease, watch_seq=seq) is None:
        return
    await svc.jobs.enqueue(
        WATCH_JOB, WatchJob(team=lease.team, channel=lease.channel, lease_id=lease.lease_id, seq=seq),
        job_id=f"watch:{lease.lease_id}:{seq}", defer_by=delay,
    )


def awaited_job(lease: Lease) -> tuple[JobSpec, LeaseJob | ProvisionJob | WatchJob, str] | None:
    """The job a lease waits on next (spec, arguments, id); None for a FAILED lease, which waits on none."""
    if lease.state == LeaseState.PENDING or (lease.state == LeaseState.CREATING and not lease.watch_seq):
        round_ = lease.search_round  # a zone search may be in its nth job run
        return (PROVISION_JOB, ProvisionJob(team=lease.team, channel=lease.channel, lease_id=lease.lease_id,
                                            search_round=round_), provision_job_id(lease.lease_id, round_))
    if lease.state == LeaseState.TEARING_DOWN:
        return _teardown_job(lease)
    if lease.state == LeaseState.FAILED:
        return None
    return (WATCH_JOB, WatchJob(team=lease.team, channel=lease.channel, lease_id=lease.lease_id, seq=lease.watch_seq),
            f"watch:{lease.lease_id}:{lease.watch_seq}")


def awaited_job_id(lease: Lease) -> str | None:
    awaited = awaited_job(lease)
    return None if awaited is None else awaited[2]


async def resume_job_for(svc: ChannelDeps, lease: Lease) -> bool:
    """Re-enqueue whatever job a lease is waiting on (after a crash between a write and its enqueue)."""
    awaited = awaited_job(lease)
    if awaited is None:
        return False
    spec, args, job_id = awaited
    return await svc.jobs.enqueue(spec, args, job_id=job_id)
