"""Worker jobs for issue 4: deadline timers, the idle clock and the reconciler's schedule.

bot/worker.py registers `FUNCTIONS` and `cron_jobs(settings)`; the bodies live in agent/.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from arq import Retry, cron
from arq.cron import CronJob

from agent.lease import expiry, idle, lifecycle, reconcile
from bot.settings import Settings

async def fire_timer(ctx: dict, *, team: str, channel: str, lease_id: str, kind: str, deadline: float,
                     due: float) -> str:
    try:
        return await expiry.fire_timer(ctx["services"], team, channel, lease_id, kind, deadline, due)
    except lifecycle.LockBusy:
        raise Retry(defer=await lifecycle.lock_retry_delay(ctx["services"], team, channel, ctx["job_try"])) from None


async def check_idle(ctx: dict, *, team: str, channel: str, lease_id: str) -> str:
    return await idle.check_idle(ctx["services"], team, channel, lease_id)


async def reconcile_gcp(ctx: dict) -> str:
    """One reconcile pass (at worker start and every RECONCILE_INTERVAL)."""
    return (await reconcile.reconcile(ctx["services"])).summary()


async def budget_alerts(ctx: dict) -> str:
    """Running leases accrue cost: post the 80 % / 100 % budget alerts they cross (issue 21)."""
    from agent.lease import budget

    posted = await budget.check_running_alerts(ctx["services"])
    return f"posted {len(posted)}"


FUNCTIONS: list[Callable[..., Awaitable[str]]] = [fire_timer, check_idle]


def cron_schedule(interval: timedelta) -> dict:
    """arq cron fields for "every `interval`", aligned to the clock so all workers agree."""
    seconds = max(1, int(interval.total_seconds()))
    if seconds < 60:
        return {"second": set(range(0, 60, seconds))}
    if seconds < 3600:
        return {"minute": set(range(0, 60, max(1, seconds // 60))), "second": {0}}
    return {"hour": set(range(0, 24, max(1, seconds // 3600))), "minute": {0}, "second": {0}}


def cron_jobs(settings: Settings) -> list[CronJob]:
    return [cron(reconcile_gcp, run_at_startup=True, **cron_schedule(settings.reconcile_interval)),
            # Its last results are kept a little while: they say what each check posted.
            cron(budget_alerts, run_at_startup=False, keep_result=120, **cron_schedule(settings.idle_check_interval))]
