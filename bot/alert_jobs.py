"""Worker jobs for issue 4: deadline timers, the idle clock and the reconciler's schedule.

bot/worker.py registers `JOBS` and `cron_jobs(settings)`; the bodies live in agent/.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from arq import Retry, cron
from arq.cron import CronJob

from agent.lease import expiry, idle, lifecycle, reconcile
from agent.lease.expiry import TIMER_JOB, TimerJob
from agent.lease.idle import IDLE_JOB
from agent.lease.lifecycle import LeaseJob
from bot.arq_worker_adapter import WorkerContext, worker_context
from bot.settings import Settings
from infra.jobs import BoundJob, JobOutcome, cron_body


async def fire_timer(context: WorkerContext, job: TimerJob) -> JobOutcome:
    try:
        return await expiry.fire_timer(context.services, job)
    except lifecycle.LockBusy:
        raise Retry(defer=await lifecycle.lock_retry_delay(context.services, job.team, job.channel,
                                                           context.job_try)) from None


async def check_idle(context: WorkerContext, job: LeaseJob) -> JobOutcome:
    return await idle.check_idle(context.services, job)


async def reconcile_gcp(ctx: dict) -> JobOutcome:
    """One reconcile pass (at worker start and every RECONCILE_INTERVAL)."""
    return (await reconcile.reconcile(worker_context(ctx).services)).outcome()


async def budget_alerts(ctx: dict) -> JobOutcome:
    """Running leases accrue cost: post the 80 % / 100 % budget alerts they cross (issue 21)."""
    from agent.lease import budget

    posted = await budget.check_running_alerts(worker_context(ctx).services)
    return JobOutcome.ok(f"posted {len(posted)}")


JOBS: list[BoundJob[WorkerContext, Any]] = [TIMER_JOB.bind(fire_timer), IDLE_JOB.bind(check_idle)]


def cron_schedule(interval: timedelta) -> dict:
    """arq cron fields for "every `interval`", aligned to the clock so all workers agree."""
    seconds = max(1, int(interval.total_seconds()))
    if seconds < 60:
        return {"second": set(range(0, 60, seconds))}
    if seconds < 3600:
        return {"minute": set(range(0, 60, max(1, seconds // 60))), "second": {0}}
    return {"hour": set(range(0, 24, max(1, seconds // 3600))), "minute": {0}, "second": {0}}


def cron_jobs(settings: Settings) -> list[CronJob]:
    return [cron(cron_body(reconcile_gcp), run_at_startup=True, **cron_schedule(settings.reconcile_interval)),
            # Its last results are kept a little while: they say what each check posted.
            cron(cron_body(budget_alerts), run_at_startup=False, keep_result=120, **cron_schedule(settings.idle_check_interval))]
