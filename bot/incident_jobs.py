"""Worker jobs for issue 32: an alert webhook's delivery, the storm message that counts the alerts
folded into it, and a follow-up reply in a thread the bot follows. bot/worker.py registers
`FUNCTIONS`; the bodies live in handlers/incident_job.py and handlers/followups.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from arq import Retry

from handlers import followups, incident_job
from infra.state.incidents import IncidentStore

BUSY_RETRY_SECONDS = 1  # a repeat that arrives while its thread is being opened waits this long


async def handle_alert(ctx: dict, **delivery: Any) -> str:
    try:
        return await incident_job.handle_alert(ctx["services"], ctx["slack"], IncidentStore(ctx["state_redis"]),
                                               **delivery)
    except incident_job.IncidentBusy:
        raise Retry(defer=BUSY_RETRY_SECONDS) from None


async def report_folded_alerts(ctx: dict, **window: Any) -> str:
    return await incident_job.report_folded(ctx["services"], ctx["slack"], IncidentStore(ctx["state_redis"]), **window)


async def answer_followup(ctx: dict, **mention: Any) -> str:
    return await followups.answer_followup(ctx["services"], ctx["slack"], **mention)


FUNCTIONS: list[Callable[..., Awaitable[str]]] = [handle_alert, report_folded_alerts, answer_followup]
