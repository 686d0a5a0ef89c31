"""A lease whose job failed ends FAILED, with the reason and the fix on its card.

A lease job (provision, watch, model boot, teardown) that raises leaves its lease where it was:
CREATING or TEARING DOWN for good, the channel jammed, the error only in the worker's log. So
whatever the error, the lease is ended here instead:

- a lease that was getting a TPU becomes FAILED with the error as its reason (a classified cloud
  error's own fix, else where to look), is released so the channel can `/tpu up` again, and its
  queued resource, if one was made, is deleted: nobody would be watching it;
- a lease that holds a running TPU (ACTIVE and after) becomes FAILED with the reason on its card
  and keeps its TPU and its lease, as a failed model boot does: a job that failed (or ran out of
  tries on an outage that outlasted them) says nothing about the TPU, and deleting one that may
  serve fine is not the bot's to decide; `/tpu down` releases it, and its deadline still ends it;
- a lease being torn down is released with the error on its card: the teardown finishes.

Two paths lead here: the job's own exception, caught where the worker runs lease jobs (at once),
and a failure arq kept for a job that never returned (it ran past JOB_TIMEOUT, or out of tries),
found by the worker's minute pass (`fail_if_its_job_failed`), so within a minute either way.
"""

from __future__ import annotations

import logging

from agent.context import WorkerLeaseDeps
from agent.lease.lifecycle import (
    LeaseJob,
    ProvisionJob,
    WatchJob,
    awaited_job_id,
    change_lease,
    explain,
    fail_lease,
    release_lease,
)
from agent.redact import redact
from infra.jobs import JobOutcome, describe_failure
from infra.state.leases import Lease, LeaseState
from infra.tpu_errors import TpuError
from infra.transient import REDIS_AWAY

log = logging.getLogger(__name__)

JOB_NAMES = {"provision": "provisioning", "watch": "watching", "boot": "model boot", "teardown": "teardown"}
AGAIN = {"teardown": "nothing to do: a queued resource left behind is found by the reconciler through its labels "
                     "and shown in this channel again"}


KEPT = ("the TPU is still running (and billing) and this lease keeps it: `/tpu down` releases it, "
        "`/tpu status` shows it meanwhile")


def failure_reason(error: BaseException | str, job: str, lease_id: str, *, again: str = "") -> str:
    """What the card says: a classified cloud error as it explains itself (message, then its fix);
    anything else as what stopped which job, and where the details are."""
    if isinstance(error, TpuError):
        return redact(explain(error) + (f" {again[:1].upper()}{again[1:]}." if again else ""))
    what = error if isinstance(error, str) else describe_failure(error)
    again = again or AGAIN.get(job, "run `/tpu up` again")
    return redact(f"The {JOB_NAMES.get(job, job)} job stopped on an error: {what}. Fix: {again}; if it happens "
                  f"again, the worker's log has the details (its lines name lease_id {lease_id}).")


async def lease_job_failed(svc: WorkerLeaseDeps, lease: Lease | None, job: str,
                           error: BaseException | str) -> JobOutcome:
    """End `lease` after its `job` failed with `error` (see the module docstring)."""
    kept = lease is not None and lease.state.holds_tpu
    reason = failure_reason(error, job, lease.lease_id if lease else "?", again=KEPT if kept else "")
    if lease is None:
        return JobOutcome.failed(reason[:200])
    log.error("lease %s: its %s job failed, so the lease ends: %s", lease.lease_id, job, reason)
    if lease.state == LeaseState.FAILED:
        return JobOutcome.failed("already failed")
    if lease.state == LeaseState.TEARING_DOWN:
        await release_lease(svc, lease, reason=f"the teardown stopped on an error ({reason.rstrip('.')})", by=lease.torn_down_by)
        return JobOutcome.failed(f"released after the teardown failed: {reason[:160]}")
    if lease.state.holds_tpu:
        await change_lease(svc, lease, state=LeaseState.FAILED, detail=reason)
        await svc.audit.record(actor="tpubot", action=job, team=lease.team, channel=lease.channel,
                               outcome="failed", detail=reason)
        return JobOutcome.failed(f"the TPU is kept: {reason[:160]}")
    await fail_lease(svc, lease, reason)
    if lease.state != LeaseState.PENDING:  # a PENDING lease never asked GCP for anything
        await _delete_quietly(svc, lease)
    return JobOutcome.failed(reason[:200])


async def say_the_api_is_failing(svc: WorkerLeaseDeps, name: str, job: LeaseJob | ProvisionJob | WatchJob,
                                 error: BaseException, retry_in: int) -> None:
    """A provision try stopped by the TPU API failing past its client's retries is run again later
    (transient): its card says so and when, instead of "Requesting a TPU…" through an outage. The
    next try's own progress replaces the line."""
    if name != "provision" or not isinstance(error, TpuError):
        return
    try:
        lease = await svc.leases.get_by_id(job.team, job.channel, job.lease_id)
        if lease is not None and lease.state in (LeaseState.PENDING, LeaseState.CREATING):
            await change_lease(svc, lease, detail=redact(f"The TPU API keeps failing ({error.message[:200]}); "
                                                         f"trying again in {retry_in}s."))
    except REDIS_AWAY as away:  # the try is retried anyway; the card catches up with its next line
        log.warning("lease %s: could not say on its card that the TPU API is failing (%s)", job.lease_id, away)


async def _delete_quietly(svc: WorkerLeaseDeps, lease: Lease) -> None:
    """Delete whatever QR the lease may have made; an error here changes nothing already said (the
    reconciler finds a QR left behind by its labels)."""
    try:
        await svc.tpu.aio.delete_queued_resource(lease.zone, lease.qr_id, wait=False)
    except TpuError as error:
        log.warning("lease %s: could not delete %s after its job failed: %s", lease.lease_id, lease.qr_id, error)


async def fail_if_its_job_failed(svc: WorkerLeaseDeps, lease: Lease) -> bool:
    """End a lease whose awaited job is over with a failure arq kept (a timeout, no tries left):
    no job of its own will ever move it again. True if it was ended."""
    awaited = awaited_job_id(lease)
    if awaited is None:
        return False
    failure = await svc.jobs.failure(awaited)
    if failure is None:
        return False
    await lease_job_failed(svc, lease, awaited.split(":", 1)[0], failure)
    return True
