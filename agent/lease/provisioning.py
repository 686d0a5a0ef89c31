"""The provision job: create the channel's queued resource, then hand over to the watcher.

With an explicit `/tpu up ZONE` the QR is created in that zone only. Without one, the job runs a
zone search (agent/lease/zone_search.py): best-known zones first, every attempt on the scoreboard,
configuration errors stop the search with the setting to fix.

Idempotent: the QR id is derived from the lease, so a retried job (or a second worker) adopts the
QR an earlier run created (409) instead of creating another, and a create the API kept failing (a 504
may come back for a create that was made) is looked for before the lease is failed; a search longer
than one run's budget continues in a new job (`provision:{lease}:{round}`) and skips what the
scoreboard now knows.
"""

from __future__ import annotations

import time
from datetime import timedelta

from agent.context import ChannelDeps, ChannelUnreachable, WorkerLeaseDeps
from agent.lease.budget import searchable_zones
from agent.lease.lifecycle import (
    PROVISION_JOB,
    ProvisionJob,
    abandon_unpostable,
    change_lease,
    explain,
    fail_lease,
    lease_state_for,
    provision_job_id,
    schedule_watch,
)
from agent.lease.zone_search import SearchOutcome, SearchStatus, ZoneSearch, nothing_to_try_message, unavailable_message
from infra.jobs import JobOutcome
from infra.state.leases import Lease, LeaseState
from infra.state.locks import HeldLock
from infra.model_keys import ModelKeyError
from infra.tpu import QrSpec, QueuedResourceView, TpuError, bot_labels

WORKING_STATES = (LeaseState.PENDING, LeaseState.CREATING)


async def provision_job(svc: WorkerLeaseDeps, job: ProvisionJob) -> JobOutcome:
    lease = await svc.leases.get_by_id(job.team, job.channel, job.lease_id)
    if lease is None or lease.state not in WORKING_STATES or lease.search_round != job.search_round:
        return JobOutcome.skipped("lease changed")
    async with svc.locks.hold(job.team, job.channel) as lock:
        first_try = lease.state == LeaseState.PENDING  # no try of this lease has sent a create yet
        if first_try:
            try:
                lease = await svc.observer.lease_changed(lease)
            except ChannelUnreachable as error:
                # Before any QR exists: give the channel back rather than run a TPU nobody can see.
                await abandon_unpostable(svc, lease, error)
                return JobOutcome.failed(error.reason)
            lease = await change_lease(svc, lease, state=LeaseState.CREATING) or lease
        return await _provision(svc, lease, lock, first_try=first_try)


async def _provision(svc: WorkerLeaseDeps, lease: Lease, lock: HeldLock, *, first_try: bool) -> JobOutcome:
    # A QR an earlier try created (a crash between the create and the state write, a create whose answer
    # was lost) is adopted. When the look fails past the client's retries, a first try frees the channel
    # at once (nothing can exist yet); a later one leaves the error to the job's tries (transient), whose
    # end deletes whatever may exist, rather than tell the channel "nothing was created" on a guess.
    try:
        existing = await svc.tpu.aio.get_queued_resource(lease.zone, lease.qr_id)
    except TpuError as error:
        if not error.retryable or not first_try:
            raise
        await fail_lease(svc, lease, unavailable_message(error))
        return JobOutcome.failed(error.kind.value)
    if existing is not None:
        return await _adopted(svc, lease, existing)
    # The VM reads the key at boot, so it must exist before the create; a retried job keeps it.
    try:
        await svc.model_keys.create(lease.lease_id)
    except ModelKeyError as error:
        await fail_lease(svc, lease, f"{error.message} Fix: {error.fix}")
        return JobOutcome.failed("model key")

    board = svc.scoreboard
    if lease.zone_explicit:
        zones = [lease.zone]
    else:
        zones = await searchable_zones(svc, lease.team, lease.channel)
    search = ZoneSearch(svc.tpu, board, zones=zones, default_zone=svc.policy.default_zone)
    if lease.zone_explicit:
        order = [lease.zone]  # the user chose: no skips, no filter — the error (if any) says why
    else:
        plan = await search.plan()
        order = plan.order
        if not order:
            await fail_lease(svc, lease, nothing_to_try_message(plan, svc.policy.accelerator_type))
            return JobOutcome.failed("no zone to try")

    current = lease

    async def create(zone: str, n: int, total: int):
        nonlocal current
        await lock.extend()  # LockLost if another worker took the lease over: no create without the lock
        note = f"Trying {zone} ({n} of {total})…" if total > 1 else f"Requesting a TPU in {zone}…"
        current = await change_lease(svc, current, zone=zone, detail=note) or current
        spec = QrSpec(
            qr_id=current.qr_id, node_id=current.node_id, zone=zone,
            labels=bot_labels(current.team, current.channel, current.lease_id, holder=current.holder),
            startup_script=svc.startup_script(current),
            max_run_duration=timedelta(seconds=current.run_seconds),
        )
        return await svc.tpu.aio.create_queued_resource(spec)

    async def still_wanted() -> bool:
        fresh = await svc.leases.get_by_id(current.team, current.channel, current.lease_id)
        return fresh is not None and fresh.state in WORKING_STATES

    deadline = time.monotonic() + svc.policy.search_budget.total_seconds()
    outcome = await search.run(order, create, lease_id=lease.lease_id, deadline=deadline, still_wanted=still_wanted)
    await lock.extend()  # the search can outlast a stall; what follows writes the lease
    if outcome.created:
        return await _created(svc, current, outcome)
    if outcome.status is SearchStatus.CANCELLED:
        return JobOutcome.stopped("lease changed during the search")
    if outcome.status is SearchStatus.TIME_BUDGET:
        return await _continue_later(svc, current)
    if outcome.status is SearchStatus.UNAVAILABLE:
        return await _unconfirmed_create(svc, current, outcome)
    if lease.zone_explicit and outcome.status is SearchStatus.EXHAUSTED and outcome.last_error is not None:
        await fail_lease(svc, current, f"{explain(outcome.last_error)} (You asked for {lease.zone}; `/tpu up` "
                                       "without a zone searches the other configured zones.)")
        return JobOutcome.failed(outcome.last_error.kind.value)
    await fail_lease(svc, current, outcome.message or "No zone could be tried.")
    return JobOutcome.failed(outcome.status.value)


async def _created(svc: ChannelDeps, lease: Lease, outcome: SearchOutcome) -> JobOutcome:
    qr = outcome.qr
    assert qr is not None, "a created outcome carries its QR"
    now = time.time()
    valid_until = qr.valid_until_time.timestamp() if qr.valid_until_time else \
        now + svc.policy.valid_until.total_seconds()
    lease = await change_lease(
        svc, lease, state=lease_state_for(qr.state), zone=outcome.zone, queued_at=lease.queued_at or now,
        valid_until=valid_until, detail="",
    ) or lease
    await schedule_watch(svc, lease, delay=svc.policy.poll_interval)
    tries = len(outcome.attempts)
    return JobOutcome.ok(f"created {lease.qr_id} in {lease.zone}" + (f" after {tries} attempts" if tries > 1 else ""))


async def _adopted(svc: ChannelDeps, lease: Lease, qr: QueuedResourceView) -> JobOutcome:
    """A QR of this lease's that an earlier try made, taken on as if this try had."""
    return await _created(svc, lease, SearchOutcome(status=SearchStatus.CREATED, zone=lease.zone, qr=qr))


async def _unconfirmed_create(svc: WorkerLeaseDeps, lease: Lease, outcome: SearchOutcome) -> JobOutcome:
    """The API kept failing the create past the client's retries. A timeout (504, DEADLINE_EXCEEDED)
    may come back for a create that was made, so ask for the QR before saying nothing was: one that
    exists is this lease's (its id comes from the lease) and is adopted, not left running unowned. A
    question that fails too is a transient error: the job runs again later and asks first."""
    made = await svc.tpu.aio.get_queued_resource(lease.zone, lease.qr_id)
    if made is not None:
        return await _adopted(svc, lease, made)
    await fail_lease(svc, lease, outcome.message or "The TPU API kept failing after retries.")
    return JobOutcome.failed(SearchStatus.UNAVAILABLE.value)


async def _continue_later(svc: ChannelDeps, lease: Lease) -> JobOutcome:
    next_round = lease.search_round + 1
    updated = await svc.leases.update(lease, search_round=next_round)
    if updated is None:
        return JobOutcome.stopped("lease changed")
    await svc.jobs.enqueue(PROVISION_JOB, ProvisionJob(team=lease.team, channel=lease.channel, lease_id=lease.lease_id,
                                                       search_round=next_round),
                           job_id=provision_job_id(lease.lease_id, next_round))
    return JobOutcome.ok(f"continuing the zone search (round {next_round})")


__all__ = ["provision_job", "provision_job_id", "explain"]
