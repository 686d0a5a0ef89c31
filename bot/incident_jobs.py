"""Worker jobs for issues 32 and 42: an alert webhook's delivery, the storm message that counts the
alerts a route folded, and a follow-up reply in a thread the bot follows. bot/worker.py registers
`JOBS`; the bodies live in handlers/incident_job.py and handlers/followups.py."""

from __future__ import annotations

from arq import Retry

from handlers import followups, incident_job
from handlers.followups import FOLLOWUP_JOB, FollowupJob
from handlers.incident_job import ALERT_JOB, FOLD_JOB, AlertJob, FoldJob
from infra.jobs import BoundJob, JobOutcome
from infra.state.incidents import IncidentStore

BUSY_RETRY_SECONDS = 1  # a repeat that arrives while its thread is being opened waits this long


async def handle_alert(ctx: dict, job: AlertJob) -> JobOutcome:
    try:
        return await incident_job.handle_alert(ctx["services"], ctx["slack"], IncidentStore(ctx["state_redis"]),
                                               alert=job.alert, channel=job.channel, page=job.page,
                                               storm_threads=job.storm_threads, storm_window=job.storm_window,
                                               route=job.route, page_reason=job.page_reason,
                                               accepted_at=job.accepted_at)
    except incident_job.IncidentBusy:
        raise Retry(defer=BUSY_RETRY_SECONDS) from None


async def report_folded_alerts(ctx: dict, job: FoldJob) -> JobOutcome:
    try:
        return await incident_job.report_folded(ctx["slack"], IncidentStore(ctx["state_redis"]), window=job.window,
                                                channel=job.channel, storm_threads=job.storm_threads,
                                                storm_window=job.storm_window, route=job.route,
                                                severity=job.severity, source=job.source)
    except incident_job.IncidentBusy:
        raise Retry(defer=BUSY_RETRY_SECONDS) from None


async def answer_followup(ctx: dict, job: FollowupJob) -> JobOutcome:
    return await followups.answer_followup(ctx["services"], ctx["slack"], **FOLLOWUP_JOB.to_kwargs(job))


JOBS: list[BoundJob] = [ALERT_JOB.bind(handle_alert), FOLD_JOB.bind(report_folded_alerts),
                        FOLLOWUP_JOB.bind(answer_followup)]
