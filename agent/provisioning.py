"""The provision job: create the channel's queued resource, then hand over to the watcher."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from agent.context import Services
from agent.lifecycle import (
    LockBusy,
    explain,
    fail_lease,
    lease_state_for,
    notify,
    schedule_watch,
)
from infra.state.leases import LeaseState


async def provision_job(svc: Services, team: str, channel: str, lease_id: str) -> str:
    from infra.tpu import QrSpec, TpuError, bot_labels

    lease = await svc.leases.get_by_id(team, channel, lease_id)
    if lease is None or lease.state not in (LeaseState.PENDING.value, LeaseState.CREATING.value):
        return "skipped: lease changed"
    token = await svc.locks.acquire(team, channel)
    if token is None:
        raise LockBusy(f"{team}/{channel}")
    try:
        lease = await notify(svc, lease)
        lease = await svc.leases.update(lease, state=LeaseState.CREATING) or lease
        lease = await notify(svc, lease)
        spec = QrSpec(
            qr_id=lease.qr_id, node_id=lease.node_id, zone=lease.zone,
            labels=bot_labels(team, channel, lease.lease_id, holder=lease.holder),
            startup_script=svc.startup_script(lease),
            max_run_duration=timedelta(seconds=lease.run_seconds),
        )
        try:
            qr = await asyncio.to_thread(svc.tpu.create_queued_resource, spec)
        except TpuError as error:
            await fail_lease(svc, lease, explain(error))
            return f"failed: {error.kind.value}"
        lease = await svc.leases.update(lease, state=lease_state_for(qr.state)) or lease
        lease = await notify(svc, lease)
        await schedule_watch(svc, lease, delay=svc.policy.poll_interval)
        return f"created {lease.qr_id} in {lease.zone}"
    finally:
        await svc.locks.release(team, channel, token)
