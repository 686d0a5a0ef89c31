"""The watch job: one look at the QR per run, card kept current, re-scheduled until the lease ends."""

from __future__ import annotations

import time

from agent.context import WorkerLeaseDeps
from agent.lease.expiry import expire_lease
from agent.lease.lifecycle import (
    LockBusy,
    change_lease,
    explain,
    fail_lease,
    lease_became_active,
    lease_state_for,
    release_lease,
    WatchJob,
    schedule_watch,
)
from infra.endpoint_probe import endpoint_url
from infra.jobs import JobOutcome
from infra.state.leases import Lease, LeaseChanges, LeaseState
from infra.tpu import QrState, TpuError, classify_failed_qr


async def watch_job(svc: WorkerLeaseDeps, job: WatchJob) -> JobOutcome:
    """One look at the QR; re-schedules itself, so no job holds a worker for hours."""
    lease = await svc.leases.get_by_id(job.team, job.channel, job.lease_id)
    if lease is None or lease.state in (LeaseState.TEARING_DOWN, LeaseState.FAILED):
        return JobOutcome.stopped("lease changed")
    try:
        qr = await svc.tpu.aio.get_queued_resource(lease.zone, lease.qr_id)
    except TpuError as error:
        if not error.retryable:
            raise
        await schedule_watch(svc, lease, delay=svc.policy.poll_interval)
        return JobOutcome.retry(f"{error.kind}")  # "TpuErrorKind.UNAVAILABLE": the text it has always stored
    if qr is None:
        if lease.deadline and time.time() >= lease.deadline - 1:
            # At the deadline the expiry path (which holds the channel lock) may have just deleted
            # the QR; let it finish, so the lease ends once, as an expiry.
            return await _expire(svc, lease, qr_state="gone")
        await release_lease(svc, lease, reason="The queued resource no longer exists in GCP; the lease is released")
        return JobOutcome.ok("released: QR gone")
    if qr.state == QrState.FAILED:
        failure = classify_failed_qr(qr)
        await fail_lease(svc, lease, explain(failure) if failure else f"The queued resource failed: {qr.failure_message}")
        await svc.tpu.aio.delete_queued_resource(lease.zone, lease.qr_id)
        return JobOutcome.failed()
    new_state = lease_state_for(qr.state)
    changes: LeaseChanges = {}
    if new_state != lease.state and not (lease.state.holds_tpu and new_state == LeaseState.ACTIVE):
        changes["state"] = new_state
    if new_state == LeaseState.ACTIVE and not lease.active_at:
        now = time.time()
        changes["active_at"], changes["deadline"] = now, now + lease.run_seconds
        node = await svc.tpu.aio.get_node(lease.zone, lease.node_id)
        if node and node.external_ip:
            changes["endpoint"] = endpoint_url(node.external_ip, svc.policy.model_port)
    if changes:
        lease = await change_lease(svc, lease, **changes) or lease
        if "active_at" in changes:
            await lease_became_active(svc, lease)
    if qr.state.is_terminal:
        # Flex-start deleted the VMs; the leftover QR still holds quota. The deadline timer and
        # this watcher share one expiry path, so the channel gets one expiry alert.
        return await _expire(svc, lease, qr_state=qr.state, initiator=qr.state_initiator)
    delay = svc.policy.active_poll_interval if lease.state.holds_tpu else svc.policy.poll_interval
    await schedule_watch(svc, lease, delay=delay)
    return JobOutcome.ok(f"watching: {qr.state}")


async def _expire(svc: WorkerLeaseDeps, lease: Lease, *, qr_state: str, initiator: str = "") -> JobOutcome:
    try:
        return await expire_lease(svc, lease, cause="watcher", qr_state=qr_state, initiator=initiator)
    except LockBusy:
        await schedule_watch(svc, lease, delay=svc.policy.poll_interval)
        return JobOutcome.retry("channel busy")
