"""arq's Worker, made to ride out a Redis outage instead of exiting on the first ConnectionError.

arq 0.28 lets any Redis error escape its poll loop, which ends the process (and, under a
Procfile runner, every process beside it). Here each place the worker talks to Redis between
jobs either waits and retries with backoff and jitter (bot/redis_outage.py) or leaves the job
where another try will find it:

- the poll loop (queue read, health record, cron enqueue) backs off and polls again;
- a cron tick whose enqueue failed is kept due, so it fires late, once (its job id is unique);
- a job's bookkeeping (finish_job) is retried until Redis is back, so a finished job is not
  run again and a retried one keeps its place;
- a job that could not be started (its first read failed) is released for the next poll;
- jobs themselves turn a Redis error into arq's Retry (bot/worker.py).

A worker that dies mid-job has its job run again by another within seconds (bot/orphaned_jobs.py).

Shutdown waits for in-flight bookkeeping, so no coroutine is left on a closed loop.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any, Optional

from arq.constants import in_progress_key_prefix
from arq.worker import Worker

from bot.orphaned_jobs import HEARTBEAT_SECONDS, JobOwnership
from bot.redis_outage import Reconnecting, is_redis_away, wait_for_redis
from bot.wiring import arq_pool

log = logging.getLogger("tpubot.worker")

# How long a stopping worker waits for its cancelled jobs' clean-up (a lock release, the job's
# bookkeeping) before it leaves them: well inside a supervisor's stop timeout.
SHUTDOWN_DRAIN_SECONDS = 4.0


class ResilientWorker(Worker):
    def __init__(self, *args: Any, redis_url: str, startup_wait: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._redis_url = redis_url
        self._startup_wait = startup_wait
        self._redis = Reconnecting("worker", log)
        self._stopping = False
        self._bookkeeping: set[asyncio.Task] = set()
        self._own_shutdown = self.on_shutdown
        self.on_shutdown = self._shutdown
        self.ownership = JobOwnership(queue_name=self.queue_name, owner_ttl_seconds=int(self.in_progress_timeout_s) + 1)
        # on_startup builds the services with it, so this process's lock tokens name it (bot/orphaned_jobs.py).
        self.ctx["worker_id"] = self.ownership.worker_id
        self._own_job_start = self.on_job_start
        self.on_job_start = self._job_started

    async def _job_started(self, ctx: dict) -> None:
        await self.ownership.job_started(self.pool, ctx["job_id"])
        if self._own_job_start:
            await self._own_job_start(ctx)

    async def main(self) -> None:
        if self._pool is None:
            pool = await arq_pool(self._redis_url)
            try:
                await wait_for_redis(pool.ping, self._redis_url, log, what="worker start-up",
                                     timeout=self._startup_wait)
            except BaseException:
                await pool.aclose()
                raise
            self._pool = pool
        beats = asyncio.create_task(self.ownership.run(self._pool), name="tpubot-worker-heartbeat")
        try:
            await super().main()
        finally:
            beats.cancel()
            # Bounded: a stopping worker must never wait on its heartbeat.
            await asyncio.wait([beats], timeout=HEARTBEAT_SECONDS)

    async def _poll_iteration(self) -> None:
        if self._stopping:
            # handle_sig cancelled main, but a library call under it can swallow a cancellation
            # (Python 3.11's asyncio.timeout turns one that races its own deadline into a
            # TimeoutError, which reads here as "Redis away"): the poll loop must end anyway.
            raise asyncio.CancelledError("the worker is stopping")
        try:
            await super()._poll_iteration()
        except Exception as error:
            if not is_redis_away(error):
                raise
            if self._stopping:
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
        await self._bookkeep(lambda: super(ResilientWorker, self).finish_job(job_id, *args))

    async def finish_failed_job(self, job_id: str, result_data: Optional[bytes]) -> None:
        await self._bookkeep(lambda: super(ResilientWorker, self).finish_failed_job(job_id, result_data))

    async def _bookkeep(self, step) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._bookkeeping.add(task)
        try:
            await self._retry_while_away(step)
        finally:
            self._bookkeeping.discard(task)

    async def _retry_while_away(self, step) -> None:
        """Run `step()` until Redis takes it. Given up only at shutdown: the job's in-progress
        key then expires and the job runs again (jobs are idempotent by design)."""
        waiting = Reconnecting("worker bookkeeping", log)
        while True:
            try:
                await step()
            except Exception as error:
                if not is_redis_away(error):
                    raise
                if self._stopping:
                    log.warning("shutting down with a job's bookkeeping undone (%s); it will run again", error)
                    return
                await waiting.wait_after(error)
            else:
                waiting.recovered()
                return

    def handle_sig(self, signum: Any) -> None:
        self._stopping = True
        super().handle_sig(signum)

    async def _drain(self, tasks: list[asyncio.Task]) -> None:
        """Wait for cancelled jobs to finish their clean-up, a bounded time: a job that swallows
        its cancellation must not hold the process (its in-progress key expires; it runs again)."""
        pending = [task for task in tasks if not task.done()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=SHUTDOWN_DRAIN_SECONDS)
            for task in still:
                log.warning("a job did not stop within %ss of the shutdown; it will run again", SHUTDOWN_DRAIN_SECONDS)
                task.cancel()

    async def _shutdown(self, ctx: dict) -> None:
        # A job cancelled by the shutdown may still be recording its outcome under
        # asyncio.shield: finish that on this loop, before the pool closes, rather than leave a
        # pending coroutine to the garbage collector (pytest's "no running event loop" noise).
        await self._drain([*self._bookkeeping, *self.job_tasks.values()])
        if self._own_shutdown:
            await self._own_shutdown(ctx)

    async def close(self) -> None:
        """arq's close, with two changes: its gather of the cancelled jobs stopped at the first
        CancelledError and abandoned the rest (their clean-up left to the garbage collector, on a
        stopped loop: pytest's "no running event loop" warnings); and Redis may be away."""
        self._stopping = True
        if not self._handle_signals:
            self.handle_sig(signal.SIGUSR1)
        if not self._pool:
            return
        await self._drain(list(self.tasks.values()))
        try:
            await self.ownership.stopped(self.pool)
            await self.pool.delete(self.health_check_key)
        except Exception as error:
            if not is_redis_away(error):
                raise
            log.warning("worker stopping while Redis is unreachable (%s); its health key expires by itself", error)
        if self.on_shutdown:
            await self.on_shutdown(self.ctx)
        await self._pool.aclose(close_connection_pool=True)
        self._pool = None
