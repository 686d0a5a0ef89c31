"""Worker jobs for issues 32 and 42: an alert webhook's delivery, the storm message that counts the
alerts a route folded, and a follow-up reply in a thread the bot follows. bot/worker.py registers
`JOBS`; the bodies live in handlers/incident_job.py and handlers/followups.py."""

from __future__ import annotations

from typing import Any

from arq import Retry

from bot.arq_worker_adapter import WorkerContext
from handlers import followups, incident_job
from handlers.followups import FOLLOWUP_JOB, FollowupJob
from handlers.incident_job import ALERT_JOB, FOLD_JOB, AlertJob, FoldJob
from infra.jobs import BoundJob, JobOutcome

BUSY_RETRY_SECONDS = 1  # the first wait of a delivery whose thread is being opened (or storm message posted)
BUSY_RETRY_MAX_SECONDS = 60


def busy_retry_delay(attempt: int) -> float:
    """How long a delivery that found its thread being opened waits before try `attempt` + 1.

    The opener can be slow for minutes: Slack rate-limits the first message in a storm (slack_sdk
    sleeps its Retry-After twice, bot/wiring.py), and a worker killed mid-open leaves the record
    half-opened until arq runs the opening job again, which then finishes it. Doubling from 1 s to
    a minute, the job's 20 tries (infra/jobs.py's MAX_TRIES) wait about 15 minutes: past both, and
    past JOB_TIMEOUT's default (5 minutes), after which a stuck opener gives the record up."""
    return min(BUSY_RETRY_MAX_SECONDS, BUSY_RETRY_SECONDS * 2 ** max(0, attempt - 1))


async def handle_alert(context: WorkerContext, job: AlertJob) -> JobOutcome:
    try:
        return await incident_job.handle_alert(context.services, context.slack, context.incidents, job,
                                               job_id=context.job_id)
    except incident_job.IncidentBusy:
        raise Retry(defer=busy_retry_delay(context.job_try)) from None


async def report_folded_alerts(context: WorkerContext, job: FoldJob) -> JobOutcome:
    try:
        return await incident_job.report_folded(context.slack, context.incidents, job)
    except incident_job.IncidentBusy:
        raise Retry(defer=busy_retry_delay(context.job_try)) from None


async def answer_followup(context: WorkerContext, job: FollowupJob) -> JobOutcome:
    return await followups.answer_followup(context.services, context.slack, job)


JOBS: list[BoundJob[WorkerContext, Any]] = [ALERT_JOB.bind(handle_alert), FOLD_JOB.bind(report_folded_alerts),
                        FOLLOWUP_JOB.bind(answer_followup)]
