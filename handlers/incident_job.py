"""The worker side of an alert webhook (issue 32): open the incident's thread in the routed
channel, read Cloud Logging for the alert's window and resource, and answer in the thread — with
the model when the channel's TPU is READY, else the model-less digest and a "Bring the model up"
card (the same agent run a mention gets, agent/llm/loop.py). A repeat of the incident edits the
thread's first message; a resolve says so in the thread. A source that opens more than its
storm limit in one window folds the rest into one storm message that counts them.

The alert's own words (title, summary, labels) are data: they go to the model as thread context,
never as the request, and every text is redacted and mrkdwn-escaped before Slack sees it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.actions.log_actions import read_alert_logs
from agent.actions.secret_values import run_redactor
from agent.context import Actor, Services
from agent.llm.loop import run_agent
from agent.llm.material import MentionBuilder, unread_warnings
from handlers.cards import escape
from handlers.feedback_buttons import offer_feedback
from handlers.incident_payloads import AlertEvent
from handlers.incident_recall import recall_and_remember
from handlers.proposal_buttons import proposal_card
from handlers.thread_reply import ThreadReply
from infra.jobs import JobOutcome, JobSpec
from infra.state.incidents import IncidentStore

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class AlertJob:
    """One alert webhook delivery, routed: the alert (handlers/incident_payloads.AlertEvent as JSON) and where it goes."""

    alert: dict
    channel: str
    page: bool
    storm_threads: int  # ALERT_STORM_THREADS
    storm_window: float  # ALERT_STORM_WINDOW, seconds


@dataclass(frozen=True)
class FoldJob:
    """The storm message of one source's window: how many alerts were folded into it."""

    source: str
    window: int
    channel: str
    storm_threads: int
    storm_window: float


ALERT_JOB = JobSpec("handle_alert", AlertJob)
FOLD_JOB = JobSpec("report_folded_alerts", FoldJob)
ALERT_ACTOR = "alert-webhook"  # who an alert's investigation runs as (access rules see no person)
INVESTIGATE_REQUEST = "An alert fired: what went wrong in these logs?"
LOG_LEAD = timedelta(minutes=30)  # read this long before the alert started: the cause comes first
DEFAULT_LOOKBACK = timedelta(hours=1)  # an alert without a start time
FOLD_REPORT_SECONDS = 2  # the storm message is edited at most this often
SHOWN_LABELS = 8
LABEL_CHARS = 120  # of one label shown in the first message

_teams: dict[str, str] = {}  # bot token -> its workspace (auth.test), once per process


class IncidentBusy(Exception):
    """Another job is opening this incident's thread: try again in a moment."""


def alert_job_id(event: AlertEvent) -> str:
    return f"alert:{event.source}:{event.delivery}"


def fold_job_id(source: str, window: int, now: float | None = None) -> str:
    return f"alert-fold:{source}:{window}:{int((time.time() if now is None else now) // FOLD_REPORT_SECONDS)}"


async def handle_alert(svc: Services, client: AsyncWebClient, store: IncidentStore, *, alert: dict,
                       channel: str, page: bool, storm_threads: int, storm_window: float) -> JobOutcome:
    event = AlertEvent.model_validate(alert)
    incident = await store.get(event.source, event.key)
    if incident is None:
        if event.status == "resolved":
            return JobOutcome.skipped("resolved-unknown", bare=True)  # nothing of it was seen firing here: no thread to close
        opening = await store.open(event.source, event.key, channel, limit=storm_threads,
                                   window_seconds=int(storm_window))
        if opening.folded:
            await svc.jobs.enqueue(FOLD_JOB, FoldJob(source=event.source, window=opening.window, channel=channel,
                                                          storm_threads=storm_threads, storm_window=storm_window),
                                        job_id=fold_job_id(event.source, opening.window),
                                        defer_by=timedelta(seconds=FOLD_REPORT_SECONDS))
            return JobOutcome.ok("folded")
        if opening.opened:
            return await open_incident(svc, client, store, event, channel, page)
        incident = await store.get(event.source, event.key)
    if incident is None or not incident.ts:
        raise IncidentBusy(event.key)
    team = await team_of(client)
    if event.status == "resolved":
        if incident.status == "resolved":
            return JobOutcome.skipped("repeat-resolved", bare=True)
        await store.set_status(event.source, event.key, "resolved")
        await svc.memory.end(team, incident.channel, incident.ts)  # now citable when it comes back
        await client.chat_update(channel=incident.channel, ts=incident.ts, text=root_text(svc, event))
        await _post(client, incident.channel, incident.ts, resolved_text(event, incident.opened))
        await svc.audit.record(actor=ALERT_ACTOR, action="alert", team=team, channel=incident.channel,
                                    outcome="resolved", detail=f"{event.source} {event.title}")
        return JobOutcome.ok("resolved")
    repeats = await store.repeated(event.source, event.key)
    if incident.status == "resolved":
        await store.set_status(event.source, event.key, "firing")
        await _post(client, incident.channel, incident.ts, ":rotating_light: Firing again.")
    await client.chat_update(channel=incident.channel, ts=incident.ts, text=root_text(svc, event, repeats=repeats))
    return JobOutcome.ok("repeated")


async def open_incident(svc: Services, client: AsyncWebClient, store: IncidentStore, event: AlertEvent,
                        channel: str, page: bool) -> JobOutcome:
    team = await team_of(client)
    paged = await oncall_mentions(svc, team, channel) if page else []
    try:
        response = await client.chat_postMessage(channel=channel, text=root_text(svc, event, paged=paged),
                                                 unfurl_links=False, unfurl_media=False)
    except BaseException:
        await store.forget(event.source, event.key)  # a retry of this job opens it again
        raise
    ts = response["ts"]
    await store.set_thread(event.source, event.key, ts)
    await svc.followups.follow(team, channel, ts)  # replies in the incident's thread are follow-ups
    await svc.audit.record(actor=ALERT_ACTOR, action="alert", team=team, channel=channel, outcome="opened",
                                detail=f"{event.source} {event.title}")
    await investigate(svc, client, event, team=team, channel=channel, thread_ts=ts)
    return JobOutcome.ok("opened")


async def investigate(svc: Services, client: AsyncWebClient, event: AlertEvent, *, team: str, channel: str,
                      thread_ts: str) -> None:
    """The alert's logs, digested and answered in its thread; the thread is never left at the status line."""
    reply = ThreadReply(client, channel=channel, thread_ts=thread_ts, team=team, user="", redactor=svc.redactor)
    await reply.post_status()
    try:
        reply.redactor = await run_redactor(svc)
        svc = dataclasses.replace(svc, redactor=reply.redactor)
        actor = Actor(user_id=ALERT_ACTOR, team=team, channel=channel)
        logs = await read_alert_logs(svc, actor, resource_type=event.resource_type,
                                     resource_labels=event.resource_labels, window=log_window(event))
        await recall_and_remember(svc, client, event.title, logs.lines, team=team, channel=channel,
                                  thread_ts=thread_ts)
        builder = MentionBuilder(request=INVESTIGATE_REQUEST)
        builder.add("thread", alert_context(event))
        builder.add("Cloud Logging", list(logs.lines))
        if logs.problem:
            builder.notes.append(f"No logs were read: {logs.problem}")
        with builder.build() as mention:
            run = await run_agent(svc, actor, mention, reply)
            if run.used_model and mention.notes:
                run.text = "\n\n".join([*unread_warnings(mention), run.text])
            if logs.describe:
                run.text = f"Read {logs.describe}.\n\n{run.text}"
            for proposal in run.proposals:
                card_text, blocks = proposal_card(proposal)
                await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=card_text, blocks=blocks,
                                              unfurl_links=False, unfurl_media=False)
            await reply.finish(run)
            await offer_feedback(svc, client, reply, run, mention)
    except Exception as error:
        log.exception("investigating an alert failed")
        await reply.fail(f":warning: Something went wrong while investigating ({type(error).__name__}).")


async def report_folded(svc: Services, client: AsyncWebClient, store: IncidentStore, *, source: str,
                        window: int, channel: str, storm_threads: int, storm_window: float) -> JobOutcome:
    """Post, or edit, the window's one storm message with the count folded so far."""
    count = await store.folded(source, window)
    text = (f":ocean: *Alert storm from {source}*: {count:,} more new alert{'s' * (count != 1)} in this "
            f"{_duration(storm_window)} window {'were' if count != 1 else 'was'} folded here instead of opening "
            f"threads (at most {storm_threads} new threads per window, ALERT_STORM_THREADS).")
    posted_channel, ts = await store.storm_message(source, window)
    if ts:
        await client.chat_update(channel=posted_channel, ts=ts, text=text)
        return JobOutcome.ok(f"updated {count}")
    response = await client.chat_postMessage(channel=channel, text=text, unfurl_links=False, unfurl_media=False)
    await store.set_storm_message(source, window, channel, response["ts"], int(storm_window * 2))
    return JobOutcome.ok(f"posted {count}")


# --- texts -----------------------------------------------------------------------------------

def root_text(svc: Services, event: AlertEvent, *, repeats: int = 0, paged: list[str] | None = None) -> str:
    """The thread's first message: what fired, where from, and (edited) how often and whether it ended."""
    def safe(text: str) -> str:
        return escape(svc.redactor(text))

    head = ":white_check_mark: *RESOLVED*" if event.status == "resolved" else ":rotating_light: *FIRING*"
    severity = f" · severity {safe(event.severity)}" if event.severity else ""
    count = f" · {event.alert_count} alerts" if event.alert_count > 1 else ""
    lines = [f"{head} · {event.source} · *{safe(event.title)}*{severity}{count}"]
    if event.summary:
        lines.append(safe(event.summary))
    shown = {k: v for k, v in event.labels.items() if v and k != "source"}
    if shown:
        lines.append(" ".join(f"`{safe(f'{k}={v}'[:LABEL_CHARS]).replace('`', chr(39))}`"
                              for k, v in list(shown.items())[:SHOWN_LABELS]))
    when = [f"started {_clock(event.started_at)}"] if event.started_at else []
    if event.ended_at:
        when.append(f"ended {_clock(event.ended_at)}")
    if event.url.startswith(("https://", "http://")):
        when.append(f"<{escape(event.url)}|open in {event.source}>")
    if when:
        lines.append(" · ".join(when))
    if repeats:
        lines.append(f"_Sent again {repeats} time{'s' * (repeats != 1)}; last at {_clock(datetime.now(timezone.utc))}._")
    if paged:
        lines.append(f"Paging {' '.join(paged)} (severity {safe(event.severity) or 'unset'}).")
    return "\n".join(lines)


def resolved_text(event: AlertEvent, opened: float) -> str:
    ended = event.ended_at or datetime.now(timezone.utc)
    lasted = max(0.0, ended.timestamp() - (event.started_at.timestamp() if event.started_at else opened))
    return f":white_check_mark: Resolved at {_clock(ended)} (after {_duration(lasted)}). This thread is closed."


def alert_context(event: AlertEvent) -> list[str]:
    """The alert as the model sees it: quoted data, one fact a line."""
    lines = [f"alert from {event.source}: {event.title} ({event.status})"]
    if event.summary:
        lines.append(f"summary: {event.summary}")
    if event.severity:
        lines.append(f"severity: {event.severity}")
    if event.started_at:
        lines.append(f"started: {_clock(event.started_at)}")
    lines += [f"label {k}={v}" for k, v in list(event.labels.items())[:20] if v]
    return lines


def log_window(event: AlertEvent, now: datetime | None = None) -> tuple[datetime, datetime]:
    now = now or datetime.now(timezone.utc)
    start = (event.started_at - LOG_LEAD) if event.started_at else now - DEFAULT_LOOKBACK
    end = max(event.ended_at or now, start + timedelta(minutes=1))
    return start, end


async def oncall_mentions(svc: Services, team: str, channel: str) -> list[str]:
    """The channel's on-call (`/tpu oncall`), else its lease holder; [] when nobody is known."""
    stored = await svc.alerting.oncall.get(team, channel)
    if stored:
        return list(stored)
    lease = await svc.leases.get(team, channel)
    return [f"<@{lease.holder}>"] if lease and lease.holder else []


async def team_of(client: AsyncWebClient) -> str:
    token = client.token or ""
    if token not in _teams:
        _teams[token] = str((await client.auth_test()).get("team_id") or "")
    return _teams[token]


async def _post(client: AsyncWebClient, channel: str, thread_ts: str, text: str) -> None:
    try:
        await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text, unfurl_links=False,
                                      unfurl_media=False)
    except SlackApiError as error:
        log.warning("posting in an incident thread failed: %s", error.response.get("error"))


def _clock(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
