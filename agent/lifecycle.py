"""The lease lifecycle: claim → create the QR → follow it to ACTIVE → tear down → release.

The request side (`request_provision`, `request_teardown`, `confirm_teardown`) runs in the web
process inside Slack's 3-second ack window: it only touches Redis and enqueues jobs. The job
side (`provision_job`, `watch_job`, `teardown_job`) runs in the worker, re-reads the lease
before acting, and is safe to run twice: job ids are deterministic and every write is fenced
by the lease id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from agent.context import Actor, Services
from infra.state.leases import Lease, LeaseState

log = logging.getLogger(__name__)

PROVISION_JOB = "provision_lease"
WATCH_JOB = "watch_lease"
TEARDOWN_JOB = "teardown_lease"

# QR states as the TPU API names them; anything else is passed through as-is.
TERMINAL_QR_STATES = {"FAILED", "SUSPENDED", "SUSPENDING"}


class LockBusy(Exception):
    """The channel's operation lock is held; the job should be retried shortly."""


@dataclass(frozen=True)
class ProvisionOutcome:
    created: bool
    lease: Lease


@dataclass(frozen=True)
class TeardownOutcome:
    ok: bool
    message: str
    lease: Lease | None = None


# --- request side (web process) ---------------------------------------------------------


async def request_provision(svc: Services, actor: Actor, *, zone: str | None, hours: float | None) -> ProvisionOutcome:
    run = timedelta(hours=hours) if hours else svc.policy.max_run
    claim = await svc.leases.claim(
        team=actor.team, channel=actor.channel, holder=actor.user_id,
        zone=zone or svc.policy.default_zone, run_seconds=int(run.total_seconds()),
    )
    if claim.created:
        await svc.jobs.enqueue(
            PROVISION_JOB, job_id=f"provision:{claim.lease.lease_id}",
            team=actor.team, channel=actor.channel, lease_id=claim.lease.lease_id,
        )
    await svc.audit.record(
        actor=actor.user_id, action="up", team=actor.team, channel=actor.channel,
        outcome="claimed" if claim.created else "held", detail=claim.lease.lease_id,
    )
    return ProvisionOutcome(created=claim.created, lease=claim.lease)


def may_tear_down(svc: Services, lease: Lease, user_id: str) -> bool:
    return user_id == lease.holder or svc.policy.is_admin(user_id)


async def request_teardown(svc: Services, actor: Actor) -> TeardownOutcome:
    """Checks that there is something to tear down and that the actor may; the caller asks to confirm."""
    lease = await svc.leases.get(actor.team, actor.channel)
    if lease is None:
        return TeardownOutcome(False, "This channel holds no TPU, so there is nothing to tear down.")
    if not may_tear_down(svc, lease, actor.user_id):
        return TeardownOutcome(
            False, f"Only <@{lease.holder}> (the holder) or an admin can tear down this channel's TPU.", lease
        )
    if lease.state == LeaseState.TEARING_DOWN.value:
        return TeardownOutcome(False, "This channel's TPU is already being torn down.", lease)
    return TeardownOutcome(True, "confirm", lease)


async def confirm_teardown(svc: Services, actor: Actor, lease_id: str) -> TeardownOutcome:
    lease = await svc.leases.get_by_id(actor.team, actor.channel, lease_id)
    if lease is None:
        return TeardownOutcome(False, "That TPU is already gone; nothing changed.")
    if not may_tear_down(svc, lease, actor.user_id):
        await svc.audit.record(actor=actor.user_id, action="down", team=actor.team, channel=actor.channel,
                               outcome="denied", detail=lease_id)
        return TeardownOutcome(
            False, f"Only <@{lease.holder}> (the holder) or an admin can tear down this channel's TPU.", lease
        )
    updated = await svc.leases.update(lease, state=LeaseState.TEARING_DOWN, torn_down_by=actor.user_id)
    if updated is None:
        return TeardownOutcome(False, "That TPU is already gone; nothing changed.")
    await svc.jobs.enqueue(
        TEARDOWN_JOB, job_id=f"teardown:{lease_id}", team=actor.team, channel=actor.channel, lease_id=lease_id
    )
    await svc.audit.record(actor=actor.user_id, action="down", team=actor.team, channel=actor.channel,
                           outcome="confirmed", detail=lease_id)
    if svc.observer:
        updated = await svc.observer.lease_changed(updated)
    return TeardownOutcome(True, "Tearing down…", updated)


# --- job side (worker) ------------------------------------------------------------------


async def provision_job(svc: Services, team: str, channel: str, lease_id: str) -> str:
    from infra.tpu import QrSpec, TpuError, bot_labels

    lease = await svc.leases.get_by_id(team, channel, lease_id)
    if lease is None or lease.state not in (LeaseState.PENDING.value, LeaseState.CREATING.value):
        return "skipped: lease changed"
    token = await svc.locks.acquire(team, channel)
    if token is None:
        raise LockBusy(f"{team}/{channel}")
    try:
        lease = await _notify(svc, lease)
        lease = await svc.leases.update(lease, state=LeaseState.CREATING) or lease
        lease = await _notify(svc, lease)
        spec = QrSpec(
            qr_id=lease.qr_id, node_id=lease.node_id, zone=lease.zone,
            labels=bot_labels(team, channel, lease.lease_id),
            startup_script=svc.startup_script(lease),
            max_run_duration=timedelta(seconds=lease.run_seconds),
        )
        try:
            qr = await asyncio.to_thread(svc.tpu.create_queued_resource, spec)
        except TpuError as error:
            await _fail(svc, lease, _explain(error))
            return f"failed: {error.kind.value}"
        lease = await svc.leases.update(lease, state=_lease_state_for(qr.state)) or lease
        lease = await _notify(svc, lease)
        await _schedule_watch(svc, lease, delay=svc.policy.poll_interval)
        return f"created {lease.qr_id} in {lease.zone}"
    finally:
        await svc.locks.release(team, channel, token)


async def watch_job(svc: Services, team: str, channel: str, lease_id: str, seq: int) -> str:
    """One look at the QR; re-schedules itself, so no job holds a worker for hours."""
    from infra.tpu import TpuError

    lease = await svc.leases.get_by_id(team, channel, lease_id)
    if lease is None or lease.state in (LeaseState.TEARING_DOWN.value, LeaseState.FAILED.value):
        return "stopped: lease changed"
    try:
        qr = await asyncio.to_thread(svc.tpu.get_queued_resource, lease.zone, lease.qr_id)
    except TpuError as error:
        if not error.retryable:
            raise
        await _schedule_watch(svc, lease, delay=svc.policy.poll_interval)
        return f"retry: {error.kind}"
    if qr is None:
        await svc.leases.release(lease)
        if svc.observer:
            await svc.observer.lease_released(lease, reason="The queued resource no longer exists in GCP; the lease is released.")
        return "released: QR gone"
    if qr.state == "FAILED":
        from infra.tpu import classify_failed_queued_resource

        error = classify_failed_queued_resource(qr)
        await _fail(svc, lease, _explain(error) if error else f"The queued resource failed: {qr.failure_message}")
        await asyncio.to_thread(svc.tpu.delete_queued_resource, lease.zone, lease.qr_id)
        return "failed"
    new_state = _lease_state_for(qr.state)
    changes: dict[str, object] = {}
    if new_state != lease.lease_state and not (lease.lease_state.holds_tpu and new_state == LeaseState.ACTIVE):
        changes["state"] = new_state
    if new_state == LeaseState.ACTIVE and not lease.active_at:
        now = time.time()
        changes.update(active_at=now, deadline=now + lease.run_seconds)
        node = await asyncio.to_thread(svc.tpu.get_node, lease.zone, lease.node_id)
        if node and node.external_ip:
            changes["endpoint"] = f"http://{node.external_ip}:8000/v1"
    if changes:
        lease = await svc.leases.update(lease, **changes) or lease
        lease = await _notify(svc, lease)
    if qr.state in TERMINAL_QR_STATES:
        # Flex-start deleted the VMs; the leftover QR still holds quota (expiry handling lives here).
        await asyncio.to_thread(svc.tpu.delete_queued_resource, lease.zone, lease.qr_id)
        await svc.leases.release(lease)
        if svc.observer:
            await svc.observer.lease_released(lease, reason=f"The TPU reached {qr.state}; its queued resource was deleted.")
        return f"released: {qr.state}"
    delay = svc.policy.active_poll_interval if lease.lease_state.holds_tpu else svc.policy.poll_interval
    await _schedule_watch(svc, lease, delay=delay)
    return f"watching: {qr.state}"


async def teardown_job(svc: Services, team: str, channel: str, lease_id: str) -> str:
    lease = await svc.leases.get_by_id(team, channel, lease_id)
    if lease is None:
        return "skipped: already released"
    token = await svc.locks.acquire(team, channel)
    if token is None:
        raise LockBusy(f"{team}/{channel}")
    try:
        # force=true deletes the node too; a QR that is already gone counts as deleted.
        await asyncio.to_thread(svc.tpu.delete_queued_resource, lease.zone, lease.qr_id)
        deadline = time.monotonic() + svc.policy.teardown_wait.total_seconds()
        while await asyncio.to_thread(svc.tpu.get_queued_resource, lease.zone, lease.qr_id) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{lease.qr_id} still exists after {svc.policy.teardown_wait}")
            await asyncio.sleep(min(1.0, svc.policy.poll_interval.total_seconds()))
        released = await svc.leases.release(lease)
        if released and svc.observer:
            await svc.observer.lease_released(lease, reason="Torn down", by=lease.torn_down_by)
        await svc.audit.record(actor=lease.torn_down_by or "tpubot", action="teardown", team=team,
                               channel=channel, outcome="deleted", detail=lease.qr_id)
        return f"deleted {lease.qr_id}"
    finally:
        await svc.locks.release(team, channel, token)


# --- helpers ----------------------------------------------------------------------------


def _lease_state_for(qr_state: str) -> LeaseState:
    try:
        return LeaseState(qr_state)
    except ValueError:
        # ACCEPTED is the older name of WAITING_FOR_RESOURCES; DELETING/SUSPENDING show as is.
        return LeaseState.WAITING_FOR_RESOURCES if qr_state == "ACCEPTED" else LeaseState.PROVISIONING


def _explain(error) -> str:
    text = error.message
    if getattr(error, "fix", None):
        text += f" Fix: {error.fix}"
    return text


async def _fail(svc: Services, lease: Lease, reason: str) -> None:
    failed = await svc.leases.update(lease, state=LeaseState.FAILED, detail=reason)
    if failed is not None:
        await _notify(svc, failed)
        await svc.leases.release(failed)
    await svc.audit.record(actor="tpubot", action="provision", team=lease.team, channel=lease.channel,
                           outcome="failed", detail=reason)


async def _notify(svc: Services, lease: Lease) -> Lease:
    if svc.observer is None:
        return lease
    return await svc.observer.lease_changed(lease)


async def _schedule_watch(svc: Services, lease: Lease, *, delay: timedelta) -> None:
    seq = lease.watch_seq + 1
    if await svc.leases.update(lease, watch_seq=seq) is None:
        return
    await svc.jobs.enqueue(
        WATCH_JOB, job_id=f"watch:{lease.lease_id}:{seq}", defer_by=delay,
        team=lease.team, channel=lease.channel, lease_id=lease.lease_id, seq=seq,
    )


async def resume_job_for(svc: Services, lease: Lease) -> bool:
    """Re-enqueue whatever job a lease is waiting on (after a crash between a write and its enqueue)."""
    if lease.state == LeaseState.PENDING.value or (lease.state == LeaseState.CREATING.value and not lease.watch_seq):
        return await svc.jobs.enqueue(PROVISION_JOB, job_id=f"provision:{lease.lease_id}",
                                      team=lease.team, channel=lease.channel, lease_id=lease.lease_id)
    if lease.state == LeaseState.TEARING_DOWN.value:
        return await svc.jobs.enqueue(TEARDOWN_JOB, job_id=f"teardown:{lease.lease_id}",
                                      team=lease.team, channel=lease.channel, lease_id=lease.lease_id)
    if lease.state == LeaseState.FAILED.value:
        return False
    return await svc.jobs.enqueue(WATCH_JOB, job_id=f"watch:{lease.lease_id}:{lease.watch_seq}",
                                  team=lease.team, channel=lease.channel, lease_id=lease.lease_id,
                                  seq=lease.watch_seq)
