"""The `worker` process: runs lease jobs from the arq queue and resumes unfinished ones."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from arq import Retry, cron
from arq.connections import ArqRedis
from arq.typing import WorkerCoroutine
from arq.worker import Function, func
from prometheus_client import start_http_server

from agent.actions.bench_actions import BENCH_JOB, BenchJob
from agent.actions.spend_actions import SPEND_CHART_JOB, SpendChartJob
from agent.lease import job_failures, lifecycle, provisioning, teardown, watching
from agent.lease.lifecycle import PROVISION_JOB, TEARDOWN_JOB, WATCH_JOB, LeaseJob, ProvisionJob, WatchJob
from agent.lease.model_boot import BOOT_JOB
from bot import alert_jobs, incident_jobs
from bot.logging_setup import job_context
from bot.arq_worker_adapter import OutageTolerantWorker, WorkerContext, arq_job, keep_worker_context, worker_context
from bot.orphaned_jobs import HEARTBEAT_SECONDS, JobOwnership
from bot.redis_outage import REDIS_AWAY, is_redis_away
from bot.settings import Settings
from bot.wiring import build_worker_services, job_pool, slack_client_from, slack_http_session
from handlers import ask_job, bench_job, mention_job, spend_chart_job
from handlers.ask_job import ASK_JOB, AskJob
from handlers.mention_job import ANSWER_JOB, MentionJob
from infra.jobs import QUEUE_NAME, BoundJob, JobOutcome
from infra.state.incidents import IncidentStore
from infra.state.locks import LockLost
from infra.transient import is_transient

log = logging.getLogger(__name__)

# A job that meets a transient error (Redis away, a cloud call its client calls retryable) is tried
# again later, doubling from this to TRANSIENT_RETRY_CAP_SECONDS (arq counts each try): an outage of
# seconds costs seconds, and the job's tries (its JobSpec's max_tries) last minutes of a longer one, not 40 s.
REDIS_AWAY_RETRY_SECONDS = 2
TRANSIENT_RETRY_CAP_SECONDS = 60
# A job stopped because it lost its channel lock is tried again this much later: by then the
# worker that took it over holds the lock (the retry waits for it) or has finished (the retry skips).
LOCK_LOST_RETRY_SECONDS = 2


def transient_retry_delay(job_try: int) -> int:
    """When try number `job_try`, stopped by a transient error, runs again."""
    return min(TRANSIENT_RETRY_CAP_SECONDS, REDIS_AWAY_RETRY_SECONDS * 2 ** max(0, job_try - 1))


def counted(job: Callable[..., Awaitable[Any]]) -> WorkerCoroutine:
    """Count every finished job by function and outcome in the worker's /metrics; log its lines
    with the job and lease ids; and retry it, rather than fail it, on a transient error (Redis
    away, a retryable cloud error: infra/transient.py) or when it lost its channel lock part-way
    (infra/state/locks.py stopped it)."""

    name = job.spec.name if isinstance(job, BoundJob) else job.__name__

    async def run(ctx: dict, *args: Any, **kwargs: Any) -> Any:
        context = worker_context(ctx)
        metrics = context.services.metrics
        try:
            with job_context(context.job_id or "-", kwargs.get("lease_id", "-")):
                result = await job(context, *args, **kwargs)
        except Retry:
            metrics.jobs.labels(name, "retry").inc()
            raise
        except LockLost as error:
            log.warning("%s stopped: %s; retrying in %ss", name, error, LOCK_LOST_RETRY_SECONDS)
            metrics.jobs.labels(name, "retry").inc()
            raise Retry(defer=LOCK_LOST_RETRY_SECONDS) from error
        except BaseException as error:
            if not is_transient(error):
                metrics.jobs.labels(name, "error").inc()
                raise
            delay = transient_retry_delay(context.job_try)
            what = "a Redis outage" if is_redis_away(error) else "a transient error"
            log.warning("%s met %s (%s); retrying in %ss", name, what, error, delay)
            metrics.jobs.labels(name, "retry").inc()
            raise Retry(defer=delay) from error
        metrics.jobs.labels(name, "ok").inc()
        return result

    run.__qualname__ = run.__name__ = name  # arq names a cron job after its function
    return run


def registered(job: BoundJob[WorkerContext, Any]) -> Function:
    """A declared job as arq registers it: under its spec's name, with its timeout and tries, counted."""
    return func(counted(job), name=job.spec.name, timeout=job.spec.timeout, max_tries=job.spec.max_tries)


async def ending_the_lease_on_error(context: WorkerContext, job: LeaseJob | ProvisionJob | WatchJob, name: str,
                                    run: Awaitable[JobOutcome]) -> JobOutcome:
    """Run a lease job; if it raises, its lease ends with the error on its card (agent/lease/job_failures.py)
    rather than staying where it was. A busy channel, a lost lock and a transient error (Redis away, a
    503 that outlasted the client's own retries) are retried instead: they say nothing about the lease,
    and ending it would delete a TPU that runs fine."""
    svc = context.services
    try:
        return await run
    except lifecycle.LockBusy:
        raise Retry(defer=await lifecycle.lock_retry_delay(svc, job.team, job.channel, context.job_try)) from None
    except Exception as error:
        if is_transient(error) or isinstance(error, LockLost):
            await job_failures.say_the_api_is_failing(svc, name, job, error, transient_retry_delay(context.job_try))
            raise  # retried by `counted`: the lease is not failed (a lost lock: it is another worker's now)
        log.error("%s job of lease %s failed", name, job.lease_id, exc_info=error)
        lease = await svc.leases.get_by_id(job.team, job.channel, job.lease_id)
        return await job_failures.lease_job_failed(svc, lease, name, error)


async def provision_lease(context: WorkerContext, job: ProvisionJob) -> JobOutcome:
    return await ending_the_lease_on_error(context, job, "provision", provisioning.provision_job(context.services, job))


async def watch_lease(context: WorkerContext, job: WatchJob) -> JobOutcome:
    return await ending_the_lease_on_error(context, job, "watch", watching.watch_job(context.services, job))


async def teardown_lease(context: WorkerContext, job: LeaseJob) -> JobOutcome:
    return await ending_the_lease_on_error(context, job, "teardown", teardown.teardown_job(context.services, job))


async def resume_leases(context: WorkerContext) -> int:
    """Re-enqueue work a crash may have left between a lease write and its job, end a lease whose
    job failed without returning (a timeout, no tries left), and finish releases a crash left
    between the release and telling the channel."""
    svc = context.services
    resumed = 0
    for lease in await svc.leases.all():
        if await job_failures.fail_if_its_job_failed(svc, lease):
            continue
        if await lifecycle.resume_job_for(svc, lease):
            resumed += 1
    resumed += await lifecycle.finish_interrupted_releases(svc)
    if resumed:
        log.info("resumed %d lease jobs and releases", resumed)
    return resumed


async def boot_model(context: WorkerContext, job: WatchJob) -> JobOutcome:
    """After ACTIVE: wait for vLLM, then measure TTFT/TPOT (agent/lease/model_boot.py)."""
    from agent.lease import model_boot

    return await ending_the_lease_on_error(context, job, "boot", model_boot.boot_job(context.services, job))


async def bench_endpoint(context: WorkerContext, job: BenchJob) -> JobOutcome:
    """`/tpu bench`: a small sweep, the chart and table in the card thread (handlers/bench_job.py)."""
    return await bench_job.bench_endpoint(context.services, context.slack, job)


async def post_spend_chart(context: WorkerContext, job: SpendChartJob) -> JobOutcome:
    """`/tpu spend chart`: the month's spend per channel as a PNG in the channel (handlers/spend_chart_job.py)."""
    return await spend_chart_job.post_spend_chart(context.services, context.slack, job)


async def answer_mention(context: WorkerContext, job: MentionJob) -> JobOutcome:
    """One @-mention: the agent's answer in the thread (handlers/mention_job.py)."""
    return await mention_job.answer_mention(context.services, context.slack, job)


async def answer_ask(context: WorkerContext, job: AskJob) -> JobOutcome:
    """`/tpu ask …`: the model's answer, back through the command's response_url (handlers/ask_job.py)."""
    return await ask_job.answer_ask(context.services, job)


# Every job the worker runs, each bound to its declaration (tests/test_jobs.py: none missing, none extra).
JOBS: list[BoundJob[WorkerContext, Any]] = [
    ANSWER_JOB.bind(answer_mention), ASK_JOB.bind(answer_ask), PROVISION_JOB.bind(provision_lease),
    WATCH_JOB.bind(watch_lease), TEARDOWN_JOB.bind(teardown_lease), BOOT_JOB.bind(boot_model),
    BENCH_JOB.bind(bench_endpoint), SPEND_CHART_JOB.bind(post_spend_chart), *alert_jobs.JOBS, *incident_jobs.JOBS,
]


@dataclass
class Heartbeat:
    """This worker's liveness and job ownership (bot/orphaned_jobs.py), run from arq's hooks:
    beating from start-up to shutdown, and each job recorded as this worker's as it starts."""

    ownership: JobOwnership
    pool: ArqRedis  # the worker's (arq's) pool
    running: Callable[[], list[str]]  # the ids of the jobs the worker runs now (arq's job_tasks)
    task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.ownership.run(self.pool, self.running), name="tpubot-worker-heartbeat")

    async def job_started(self, ctx: dict) -> None:
        await self.ownership.job_started(*arq_job(ctx))

    async def job_ended(self, ctx: dict) -> None:
        await self.ownership.job_ended(*arq_job(ctx))

    async def stop(self) -> None:
        if self.task is None:  # on_startup never ran: the worker never started
            return
        self.task.cancel()
        # Bounded: a stopping worker must never wait on its heartbeat.
        await asyncio.wait([self.task], timeout=HEARTBEAT_SECONDS)
        try:
            await self.ownership.stopped(self.pool)
        except REDIS_AWAY as error:
            log.warning("worker stopping while Redis is unreachable (%s); its liveness key expires by itself", error)


def build_worker(settings: Settings, *, redis_url: str, burst: bool = False,
                 handle_signals: bool = True) -> OutageTolerantWorker:
    heartbeat: Heartbeat  # made beside the worker (below), before any hook runs
    opened: list[Callable[[], Awaitable[Any]]] = []  # closed by on_shutdown: none if start-up did not get there

    async def on_startup(ctx: dict) -> None:
        heartbeat.start()
        session = slack_http_session()
        slack = slack_client_from(settings, session=session)
        svc, redis, pool = await build_worker_services(
            settings, redis_url=redis_url, slack_client=slack, lock_owner=heartbeat.ownership.worker_id
        )
        opened.extend([pool.aclose, redis.aclose, session.close])
        context = WorkerContext(services=svc, slack=slack, incidents=IncidentStore(redis))
        keep_worker_context(ctx, context)
        if settings.worker_metrics_port:
            start_http_server(settings.worker_metrics_port, registry=svc.metrics.registry)
        try:
            await resume_leases(context)
        except REDIS_AWAY as error:  # the resume_leases cron does it within a minute
            log.warning("resuming leases at start-up met a Redis outage (%s); the minute cron will", error)

    async def on_shutdown(ctx: dict) -> None:
        await heartbeat.stop()
        for close in opened:
            await close()

    job_timeout = int(settings.job_timeout.total_seconds())
    kwargs: dict[str, Any] = dict(
        functions=[registered(job) for job in JOBS],
        cron_jobs=[cron(counted(resume_leases), second={0}, run_at_startup=False), *alert_jobs.cron_jobs(settings)],
        redis_pool=job_pool(redis_url),
        queue_name=QUEUE_NAME,
        on_startup=on_startup,
        on_shutdown=on_shutdown,
        on_job_start=lambda ctx: heartbeat.job_started(ctx),
        after_job_end=lambda ctx: heartbeat.job_ended(ctx),  # after arq re-queued or finished it
        job_timeout=job_timeout,
        max_jobs=20,
        poll_delay=settings.mode.target.job_poll_delay,
        burst=burst,
        handle_signals=handle_signals,
        keep_result=3600,
    )
    worker = OutageTolerantWorker(redis_url=redis_url, startup_wait=settings.redis_startup_wait.total_seconds(),
                                  **kwargs)
    # The hooks above run only once the worker does; an owner record lasts as long as arq's in-progress key.
    heartbeat = Heartbeat(JobOwnership(queue_name=QUEUE_NAME, owner_ttl_seconds=int(worker.in_progress_timeout_s) + 1),
                          pool=worker.pool,
                          running=lambda: [job_id for job_id, task in worker.job_tasks.items() if not task.done()])
    return worker
