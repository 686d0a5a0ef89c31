"""The teardown job: delete the QR (force), wait until it is gone, release the lease.

The lease is released only once the TPU API has said the QR is gone: a read that finds none
(NOT_FOUND: deleted, or never created), or a zone the API does not serve (no QR can exist there).
A transient error (a 503 that outlasted the client's own retries) stops the job with the lease
kept, and the worker runs it again later (bot/worker.py). A teardown still always finishes: an
error that retrying cannot fix (a permission refused), or a QR still there after the wait, releases
the lease with that error and its fix on the card; a QR left behind then is found by the
reconciler through its labels.
"""

from __future__ import annotations

import asyncio
import time

from agent.context import AlertingDeps, WorkerLeaseDeps
from agent.lease.lifecycle import LeaseJob, explain, finish_release, notify, release_lease
from agent.lease.receipts import LIVE_READ_TIMEOUT
from infra.durations import format_duration
from infra.jobs import JobOutcome
from infra.state.leases import Lease
from infra.tpu_errors import TpuError, TpuErrorKind
from infra.vllm_metrics import read_usage


async def teardown_job(svc: WorkerLeaseDeps, job: LeaseJob) -> JobOutcome:
    lease = await svc.leases.get_by_id(job.team, job.channel, job.lease_id)
    if lease is None:
        # Re-run after a crash between the release and telling the channel: finish the telling.
        interrupted = await svc.leases.unfinished_release(job.lease_id)
        if interrupted is None:
            return JobOutcome.skipped("already released")
        await finish_release(svc, interrupted)
        return JobOutcome.ok("finished an interrupted release")
    # The confirm click left the card to this job (nothing outbound before a Slack ack).
    lease = await notify(svc, lease)
    async with svc.locks.hold(job.team, job.channel) as lock:
        await _last_usage_reading(svc, lease)
        problem = await _delete_qr(svc, lease)
        await lock.extend()  # still ours: a worker that took the job over may have released it already
        reason = "Torn down" if not problem else (
            f"Torn down, but deleting `{lease.qr_id}` was not confirmed ({problem.rstrip('.')}); if it is still "
            "there, the reconciler finds it by its labels and shows it in this channel again")
        await release_lease(svc, lease, reason=reason, by=lease.torn_down_by)
        await svc.audit.record(actor=lease.torn_down_by or "tpubot", action="teardown", team=job.team,
                               channel=job.channel, outcome="unconfirmed" if problem else "deleted",
                               detail=lease.qr_id)
        return JobOutcome.failed(f"released unconfirmed: {problem[:160]}") if problem else \
            JobOutcome.ok(f"deleted {lease.qr_id}")


async def _last_usage_reading(svc: AlertingDeps, lease: Lease) -> None:
    """Fold in vLLM's counters while the VM still answers: the receipt is written after the delete,
    when the endpoint is gone, so without this everything served since the last idle check (all of
    it, on a lease shorter than one check interval) was missing from the receipt and `/tpu spend`."""
    if not lease.endpoint:
        return
    reading = await read_usage(lease.endpoint, timeout=LIVE_READ_TIMEOUT)
    if reading is not None:  # unreadable: the receipt keeps the last good reading, as before
        await svc.alerting.usage.record(lease.lease_id, reading, time.time())


async def _delete_qr(svc: WorkerLeaseDeps, lease: Lease) -> str:
    """Delete the lease's QR (force=true deletes the node too) and wait until the API says it is
    gone: '' then, else what stood in the way, with its fix. A transient error is raised (the job is
    retried); a lease without a `queued_at` is no proof that nothing was created (a lease the
    reconciler of an older version rebuilt has none), so every teardown asks the API."""
    deadline = time.monotonic() + svc.policy.teardown_wait.total_seconds()
    deleted = False
    while True:
        try:
            if not deleted:
                await svc.tpu.aio.delete_queued_resource(lease.zone, lease.qr_id)
                deleted = True
            if await svc.tpu.aio.get_queued_resource(lease.zone, lease.qr_id) is None:
                return ""
        except TpuError as error:
            if error.kind in (TpuErrorKind.NOT_FOUND, TpuErrorKind.ZONE_NOT_SUPPORTED):
                return ""  # gone, or a zone the TPU API does not serve: no QR can exist there
            if error.retryable:
                raise  # the lease stays TEARING_DOWN; the worker runs this job again later
            return explain(error)
        if time.monotonic() > deadline:
            return (f"it still existed after {format_duration(svc.policy.teardown_wait)}. Fix: check it with "
                    f"`gcloud compute tpus queued-resources describe {lease.qr_id} --zone {lease.zone}`.")
        await asyncio.sleep(min(1.0, svc.policy.poll_interval.total_seconds()))
