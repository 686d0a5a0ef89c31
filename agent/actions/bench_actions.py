"""bench: queue a small sweep against this channel's READY endpoint (the worker's handlers/bench_job.py runs it)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.actions.lease_actions import NoArgs
from agent.actions.run_context import RunContext
from agent.actions.registry import ActionKind, ActionResult, action
from agent.context import ChannelDeps
from infra.jobs import JobSpec
from infra.state.leases import LeaseState


@dataclass(frozen=True)
class BenchJob:
    team: str
    channel: str
    lease_id: str
    user_id: str = ""  # who asked: named in the posted chart


BENCH_JOB = JobSpec("bench_endpoint", BenchJob)


@dataclass(frozen=True)
class BenchRequest:  # bench's payload: whether a benchmark was queued (the `/tpu bench` reply's icon)
    queued: bool
NOT_READY = "No READY model in this channel — `/tpu up` first, then `/tpu bench` once the card says READY."


def bench_job_id(lease_id: str) -> str:
    # One benchmark per lease: a double-click or a second replica queues nothing new.
    return f"bench:{lease_id}"


@action("bench", "Benchmark this channel's model endpoint (a small concurrency × context sweep) and post the "
        "chart and table in the TPU's thread; it loads the model for about a minute.", NoArgs,
        kind=ActionKind.WRITE, destructive=False)
async def bench(svc: ChannelDeps, run: RunContext, args: NoArgs) -> ActionResult:
    lease = await svc.leases.get(run.actor.team, run.actor.channel)
    if lease is None or lease.state != LeaseState.READY or not lease.endpoint:
        return ActionResult.refused(NOT_READY, {"queued": False}, BenchRequest(False))
    queued = await svc.jobs.enqueue(BENCH_JOB, BenchJob(team=run.actor.team, channel=run.actor.channel,
                                                        lease_id=lease.lease_id, user_id=run.actor.user_id),
                                    job_id=bench_job_id(lease.lease_id))
    data = {"queued": queued, "lease_id": lease.lease_id, "endpoint": lease.endpoint}
    if not queued:
        return ActionResult.refused(f"A benchmark of lease `{lease.lease_id}` is already running or ran in the last "
                                    "hour; its chart is in the TPU's thread.", data, BenchRequest(False))
    return ActionResult.done(f"Benchmarking `{lease.endpoint}` (lease `{lease.lease_id}`): a small sweep, about a "
                             "minute. The chart and table will be posted in the TPU's thread, and `/tpu cost` will "
                             "show $ per million output tokens.", data, BenchRequest(True))
