"""The unit tier's stand-in for the worker: what the code under test queued, read back typed.

A handler or an action talks to the real Redis and the real arq queue (bot/wiring.py builds
them as every process does); only the consumer is missing. QueuedJobs reads the queue through
arq's documented `ArqRedis.queued_jobs()` and turns each job back into its declaration's
argument type, so a test asserts on `ProvisionJob(...)`, not on a dict of keyword arguments.
The end-to-end tests (the `stack` fixture) keep the real worker; this tier is for the checks
where a worker, four emulators and a bolt app over HTTP add nothing to what is asserted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic

from arq.connections import ArqRedis

from infra.jobs import QUEUE_NAME, Args, JobSpec


@dataclass(frozen=True)
class QueuedJob(Generic[Args]):
    job_id: str
    args: Args


class QueuedJobs:
    def __init__(self, pool: ArqRedis, queue_name: str = QUEUE_NAME) -> None:
        self._pool, self._queue_name = pool, queue_name

    async def names(self) -> list[str]:
        """Every queued job's name, in queue order (ready ones first, then the deferred)."""
        return [job.function for job in await self._pool.queued_jobs(queue_name=self._queue_name)]

    async def of(self, spec: JobSpec[Args]) -> list[QueuedJob[Args]]:
        """The queued jobs of one declaration, with their arguments as its dataclass."""
        return [QueuedJob(job.job_id or "", spec.from_kwargs(job.kwargs))
                for job in await self._pool.queued_jobs(queue_name=self._queue_name) if job.function == spec.name]
