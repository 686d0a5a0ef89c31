"""The teardown job: delete the QR (force), wait until it is gone, release the lease."""

from __future__ import annotations

import asyncio
import time

from agent.context import WorkerServices
from agent.lease.lifecycle import finish_release, notify, release_lease
from infra.jobs import JobOutcome


async def teardown_job(svc: WorkerServices, team: str, channel: str, lease_id: str) -> JobOutcome:
    lease = await svc.leases.get_by_id(team, channel, lease_id)
    if lease is None:
        # Re-run after a crash between the release and telling the channel: finish the telling.
        interrupted = await svc.leases.unfinished_release(lease_id)
        if interrupted is None:
            return JobOutcome.skipped("already released")
        await finish_release(svc, interrupted)
        return JobOutcome.ok("finished an interrupted release")
    # The confirm click left the card to this job (nothing outbound before a Slack ack).
    lease = await notify(svc, lease)
    async with svc.locks.hold(team, channel) as lock:
        # force=true deletes the node too; a QR that is already gone counts as deleted.
        await asyncio.to_thread(svc.tpu.delete_queued_resource, lease.zone, lease.qr_id)
        deadline = time.monotonic() + svc.policy.teardown_wait.total_seconds()
        while await asyncio.to_thread(svc.tpu.get_queued_resource, lease.zone, lease.qr_id) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{lease.qr_id} still exists after {svc.policy.teardown_wait}")
            await asyncio.sleep(min(1.0, svc.policy.poll_interval.total_seconds()))
        await lock.extend()  # still ours: a worker that took the job over may have released it already
        await release_lease(svc, lease, reason="Torn down", by=lease.torn_down_by)
        await svc.audit.record(actor=lease.torn_down_by or "tpubot", action="teardown", team=team,
                               channel=channel, outcome="deleted", detail=lease.qr_id)
        return JobOutcome.ok(f"deleted {lease.qr_id}")
