"""Adapter: arq's Worker, made to ride out a Redis outage where arq offers no hook for it.

Written against arq 0.28.0 (`ARQ_VERSION`); tests/test_arq_worker_adapter.py fails when the arq
behaviour each override answers changes (or the methods it overrides change shape). Everything the
worker does through arq's public surface — its pool (`redis_pool=`), job ownership
(`on_job_start=`), the heartbeat (`on_startup=`/`on_shutdown=`) — is in bot/worker.py; only
what arq 0.28 gives no hook for is here:

- `main`: arq reads Redis (INFO) before `on_startup`, so a worker started while Redis is away
  would exit at once; it waits for Redis first (up to `startup_wait`, then one clear line).
- `_poll_iteration`: any Redis error escapes arq's poll loop and ends the process (and, under a
  Procfile runner, every process beside it); here it backs off and polls again.
- `run_cron`: arq moves a cron job's next run before its enqueue; an enqueue lost to an outage is
  kept due here, so it fires late, once (its job id is unique).
- `run_job`: a job whose first read failed keeps arq's in-progress key for the job timeout;
  here it is released for the next poll.
- `finish_job`/`finish_failed_job`: a job's bookkeeping is retried until Redis is back, so a
  finished job is not run again and a retried one keeps its place.
- `handle_sig`/`close`: arq's close stops at the first cancelled job it gathers and abandons the
  rest (their clean-up left to the garbage collector on a stopped loop), and needs Redis to delete
  its health key; here every cancelled job gets a bounded drain and Redis may be away.

arq hands every job and hook an untyped `ctx` dict; `worker_context(ctx)` is the one place that
reads it (tests/test_layers.py holds that), so a misspelt key is a type error, not a KeyError mid-job.

Jobs themselves turn a Redis error into arq's Retry (bot/worker.py); a worker that dies mid-job
has its job run again by another within seconds (bot/orphaned_jobs.py).

What upstream would need to remove it: a poll loop that survives (or reports through a hook)
connection errors, with cron enqueues retried; a retry policy for the job's own bookkeeping
reads/writes; a close that waits for all cancelled jobs (asyncio.wait, not gather) and tolerates
an unreachable Redis; and a start-up that waits for Redis (create_pool's conn_retries applied to
a pool passed as `redis_pool`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Optional

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix
from arq.worker import Worker
from slack_sdk.web.async_client import AsyncWebClient

from agent.context import WorkerServices
from bot.redis_outage import Reconnecting, is_redis_away, wait_for_redis
from infra.state.incidents import IncidentStore

log = logging.getLogger("tpubot.worker")

ARQ_VERSION = "0.28.0"

# How long a stopping worker waits for its cancelled jobs' clean-up (a lock release, the job's
# bookkeeping) before it leaves them: well inside a supervisor's stop timeout.
SHUTDOWN_DRAIN_SECONDS = 4.0
CONTEXT_KEY = "tpubot"  # our one entry in arq's ctx


@dataclass(frozen=True)
class WorkerContext:
    """What a job runs with: the parts the worker made at start-up, and the running job's id and
    try (arq's, per job; a cron body's try is always 1)."""

    services: WorkerServices
    slack: AsyncWebClient
    incidents: IncidentStore
    job_id: str = ""
    job_try: int = 1


def keep_worker_context(ctx: dict, context: WorkerContext) -> None:
    """Called once, from on_startup: arq copies `ctx` into every job's."""
    ctx[CONTEXT_KEY] = context


def worker_context(ctx: dict) -> WorkerContext:
    return dataclasses.replace(ctx[CONTEXT_KEY], job_id=ctx.get("job_id", ""), job_try=ctx.get("job_try", 1))


def arq_job(ctx: dict) -> tuple[ArqRedis, str]:
    """arq's own entries in a job's ctx, for the hooks around the job: arq's pool and the job's id."""
    return ctx["redis"], ctx["job_id"]


class OutageTolerantWorker(Worker):
    def __init__(self, *args: Any, redis_url: str, startup_wait: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._redis_url = redis_url
        self._startup_wait = startup_wait
        self._redis = Reconnecting("worker", log)
        self.stopping = False
        self._reached_redis = False

    async def main(self) -> None:
        await wait_for_redis(self.pool.ping, self._redis_url, log, what="worker start-up", timeout=self._startup_wait)
        self._reached_redis = True
        await super().main()

    async def _poll_iteration(self) -> None:
        if self.stopping:
            # handle_sig cancelled main, but a library call under it can swallow a cancellation
            # (Python 3.11's asyncio.timeout turns one that races its own deadline into a
            # TimeoutError, which reads here as "Redis away"): the poll loop must end anyway.
            raise asyncio.CancelledError("the worker is stopping")
        try:
            await super()._poll_iteration()
        except Exception as error:
            if not is_redis_away(error):
                raise
            if self.stopping:
                raise asyncio.CancelledError("the worker is stopping") from error
            await self._redis.wait_after(error)
        else:
            self._redis.recovered()

    async def run_cron(self, n: Any, delay: float, num_windows: int = 2) -> None:
        due = {id(job): job.next_run for job in self.cron_jobs}
        try:
            await super().run_cron(n, delay, num_windows)
        except Exception as error:
            if not is_redis_away(error):
                raise
            for job in self.cron_jobs:  # not enqueued: still due, so the next poll after the outage enqueues it
                job.next_run = due[id(job)]
            raise

    async def run_job(self, job_id: str, score: int) -> None:
        try:
            await super().run_job(job_id, score)
        except Exception as error:
            if not is_redis_away(error):
                raise
            log.warning("job %s could not start while Redis is unreachable (%s); it stays queued", job_id, error)
            await self._retry_while_away(lambda: self.pool.delete(in_progress_key_prefix + job_id))

    async def finish_job(self, job_id: str, *args: Any) -> None:
        await self._retry_while_away(lambda: super(OutageTolerantWorker, self).finish_job(job_id, *args))

    async def finish_failed_job(self, job_id: str, result_data: Optional[bytes]) -> None:
        await self._retry_while_away(lambda: super(OutageTolerantWorker, self).finish_failed_job(job_id, result_data))

    async def _retry_while_away(self, step: Callable[[], Awaitable[Any]]) -> None:
        """Run `step()` until Redis takes it. Given up only at shutdown: the job's in-progress
        key then expires and the job runs again (jobs are idempotent by design)."""
        waiting = Reconnecting("worker bookkeeping", log)
        while True:
            try:
                await step()
            except Exception as error:
                if not is_redis_away(error):
                    raise
                if self.stopping:
                    log.warning("shutting down with a job's bookkeeping undone (%s); it will run again", error)
                    return
                await waiting.wait_after(error)
            else:
                waiting.recovered()
                return

    def handle_sig(self, signum: Any) -> None:
        self.stopping = True
        super().handle_sig(signum)

    async def close(self) -> None:
        """arq's close, with two changes: every cancelled job (and its bookkeeping) gets a bounded
        drain, where arq's gather stopped at the first CancelledError; and Redis may be away."""
        self.stopping = True
        if not self._handle_signals:
            self.handle_sig(signal.SIGUSR1)
        if not self._pool:
            return
        await _drain([*self.tasks.values(), *self.job_tasks.values()])
        try:
            # A worker that never reached Redis wrote no health key, and its start-up error is the one line.
            if self._reached_redis:
                await self.pool.delete(self.health_check_key)
        except Exception as error:
            if not is_redis_away(error):
                raise
            log.warning("worker stopping while Redis is unreachable (%s); its health key expires by itself", error)
        if self.on_shutdown:
            await self.on_shutdown(self.ctx)
        await self._pool.aclose(close_connection_pool=True)
        self._pool = None


async def _drain(tasks: list[asyncio.Task]) -> None:
    """Wait for cancelled jobs to finish their clean-up, a bounded time: a job that swallows its
    cancellation must not hold the process (its in-progress key expires; it runs again)."""
    pending = [task for task in tasks if not task.done()]
    if pending:
        _, still = await asyncio.wait(pending, timeout=SHUTDOWN_DRAIN_SECONDS)
        for task in still:
            log.warning("a job did not stop within %ss of the shutdown; it will run again", SHUTDOWN_DRAIN_SECONDS)
            task.cancel()
