"""The worker side of an alert webhook (issues 32 and 42): open the incident's thread in the
routed channel, read Cloud Logging for the alert's window and resource, and answer in the thread
— with the model when the channel's TPU is READY, else the model-less digest and a "Bring the
model up" card (the same agent run a mention gets, agent/llm/loop.py).

The thread's first message is the incident as its source reports it now, re-rendered from the
record (infra/state/incidents.py; handlers/incident_text.py writes it) after every delivery:
firing, acknowledged (by whom, when) or resolved; PagerDuty's priority and urgency with what
they were, its escalations and reassignments; an Alertmanager group's size (firing, resolved,
held back by max_alerts) and its first alerts; and "still firing", counted, each time
Alertmanager or Cloud Monitoring sends it again, however identical the bytes. A resolve also
says so in the thread; one handled before its incident opened is kept for the open.

An incident pages the channel's on-call once: with its first message when the delivery that
opens it pages, else with a reply in its thread when a later one does (a severity or priority
that went up). Nobody is paged for an incident acknowledged or resolved.

Storms are limited per ALERT_ROUTES rule and severity: a route that opens more than
ALERT_STORM_THREADS threads of one severity in a window folds the rest into one storm message
that names the route and counts what each source sent. An alert that pages is never folded.

The alert's own words (title, summary, labels, names) are data: they go to the model as thread
context, never as the request, and every text is redacted and mrkdwn-escaped before Slack sees it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.actions.run_context import RunContext
from agent.actions.log_actions import read_alert_logs
from agent.actions.model_endpoint import run_redactor
from agent.context import Actor, IncidentDeps, Services, ThreadDeps
from agent.llm.loop import run_agent
from agent.llm.material import MentionBuilder, unread_warnings
from handlers.feedback_buttons import offer_feedback
from handlers.incident_payloads import AlertEvent
from handlers.incident_recall import recall_and_remember
from handlers.incident_text import alert_context, page_text, resolved_text, root_text, storm_text
from handlers.proposal_buttons import proposal_card
from handlers.thread_reply import ThreadReply
from infra.jobs import JobOutcome, JobSpec
from infra.state import keys
from infra.state.incidents import NEVER_FOLD, Incident, IncidentStore, StateUpdate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlertJob:
    """One alert webhook delivery, routed: the alert (handlers/incident_payloads.AlertEvent as JSON) and where it goes."""

    alert: dict
    channel: str
    page: bool
    storm_threads: int  # ALERT_STORM_THREADS
    storm_window: float  # ALERT_STORM_WINDOW, seconds
    route: str = ""  # the ALERT_ROUTES rule that matched ("": `*:channel`, as jobs queued before it was sent)
    page_reason: str = ""  # why it pages ("severity critical", "priority P1"); "" with page: a job queued before it was sent
    accepted_at: float = 0.0  # when the web accepted the delivery (epoch s); 0: a job queued before it was sent


@dataclass(frozen=True)
class FoldJob:
    """The storm message of one route's window for one severity: how many alerts were folded into it."""

    window: int
    channel: str
    storm_threads: int
    storm_window: float
    route: str = ""
    severity: str = ""
    source: str = ""  # jobs queued before storms were counted per route name their source instead


ALERT_JOB = JobSpec("handle_alert", AlertJob)
FOLD_JOB = JobSpec("report_folded_alerts", FoldJob)
ALERT_ACTOR = "alert-webhook"  # who an alert's investigation runs as (access rules see no person)
INVESTIGATE_REQUEST = "An alert fired: what went wrong in these logs?"
LOG_LEAD = timedelta(minutes=30)  # read this long before the alert started: the cause comes first
DEFAULT_LOOKBACK = timedelta(hours=1)  # an alert without a start time
FOLD_REPORT_SECONDS = 2  # the storm message is edited at most this often
RENDER_TRIES = 3  # the first message is rendered again while other deliveries keep changing the record
AUTOMATION = "automation"  # who made a change when the source names nobody (PagerDuty's null agent)
REMEMBERED = ("priority", "urgency")  # shown with what they were before a change

_teams: dict[str, str] = {}  # bot token -> its workspace (auth.test), once per process


class IncidentBusy(Exception):
    """Another job is opening this incident's thread, or posting this storm message: try again in a moment."""


def alert_job_id(event: AlertEvent, accepted_at: float | None = None) -> str:
    """PagerDuty's deliveries are their event ids. A body digest (Alertmanager, Cloud Monitoring)
    comes back on every repeat, so each accepted copy's job is told apart by when it came."""
    if event.source == "pagerduty":
        return f"alert:{event.source}:{event.delivery}"
    return f"alert:{event.source}:{event.delivery}:{int((time.time() if accepted_at is None else accepted_at) * 1000)}"


def fold_job_id(route: str, severity: str, window: int, now: float | None = None) -> str:
    return f"alert-fold:{keys.storm_scope(route, severity)}:{window}:{int((time.time() if now is None else now) // FOLD_REPORT_SECONDS)}"


def state_updates(event: AlertEvent, at: float) -> list[StateUpdate]:
    """What this delivery says of the incident: its whole state as of `at`, and the change it reports."""
    snapshot = {"event": event.model_dump_json(), "status": event.status, "acknowledged": "1" if event.acknowledged else "",
                "priority": event.priority, "urgency": event.urgency}
    updates = [StateUpdate("snapshot_at", at, snapshot)]
    actor = event.actor or AUTOMATION
    if event.change == "acknowledged":
        updates.append(StateUpdate("ack_at", at, {"ack_by": actor}))
    elif event.change == "priority_updated":
        updates.append(StateUpdate("priority_at", at, {"priority_by": actor}))
    elif event.change == "escalated":
        updates.append(StateUpdate("escalated_at", at, {"escalated_by": event.actor, "escalated_to": ", ".join(event.assignees)}))
    elif event.change in ("reassigned", "delegated"):
        to = ", ".join(event.assignees) if event.change == "reassigned" else event.escalation_policy
        updates.append(StateUpdate("assigned_at", at, {"assigned": event.change, "assigned_to": to, "assigned_by": actor}))
    elif event.change == "resolved":
        updates.append(StateUpdate("resolved_at", at, {"resolved_by": actor}))
    return updates


def delivery_time(event: AlertEvent, accepted_at: float) -> float:
    """When the delivery's state holds from: the source's own time of change (PagerDuty), else when
    the web accepted it (never when its job runs: a retried older delivery is still older);
    a job queued before `accepted_at` was sent has only the time it runs."""
    if event.occurred_at:
        return event.occurred_at.timestamp()
    return accepted_at or time.time()


async def handle_alert(svc: Services, client: AsyncWebClient, store: IncidentStore, job: AlertJob, *,
                       job_id: str = "") -> JobOutcome:
    """`job_id`: this job's, so that run again after its worker died it can finish the opening it began."""
    event = AlertEvent.model_validate(job.alert)
    route = job.route or f"*:{job.channel}"
    reason = (job.page_reason or f"severity {event.severity or 'unset'}") if job.page else ""
    at = delivery_time(event, job.accepted_at)
    incident = await store.get(event.source, event.key)
    if incident is None or not incident.ts:  # not opened yet, or being opened (by this job's earlier run?)
        if event.status == "resolved":
            if incident is None and await store.resolve_early(event.source, event.key, at, event.model_dump_json()):
                # Nothing of it was seen firing here yet: no thread to close. Its open may be
                # running at this moment (a flap: triggered and resolved within milliseconds);
                # the resolve is kept for it, so the thread it opens shows it resolved.
                return JobOutcome.skipped("resolved-unknown", bare=True)
        else:
            opening = await store.open(event.source, event.key, job.channel, route=route, severity=event.severity,
                                       limit=NEVER_FOLD if job.page else job.storm_threads,
                                       window_seconds=int(job.storm_window), opener=job_id)
            if opening.folded:
                await svc.jobs.enqueue(FOLD_JOB, FoldJob(window=opening.window, channel=job.channel, route=route,
                                                         storm_threads=job.storm_threads, storm_window=job.storm_window,
                                                         severity=event.severity),
                                       job_id=fold_job_id(route, event.severity, opening.window),
                                       defer_by=timedelta(seconds=FOLD_REPORT_SECONDS))
                return JobOutcome.ok("folded")
            if opening.opened:
                closing = await _first_state(store, event, at)
                return await open_incident(svc, client, store, event, job.channel, reason, closing=closing)
        incident = await store.get(event.source, event.key)
    if incident is None or not incident.ts:
        raise IncidentBusy(event.key)
    applied = await store.apply(event.source, event.key, state_updates(event, at), remember=REMEMBERED)
    record = applied.incident or incident
    outcome = await _follow_status(svc, client, event, record, status_changed="status" in applied.changed)
    if outcome == "repeated":
        await store.repeated(event.source, event.key)
    if outcome == "repeat-resolved" and applied.changed <= {"event"}:
        return JobOutcome.skipped(outcome, bare=True)
    if reason and await page_once(svc, client, store, record, reason, in_thread=True):
        outcome += ", paged"  # it pages now (a severity or priority went up), and had not paged before
    await refresh_root(svc, client, store, event.source, event.key)
    return JobOutcome.ok(outcome)


async def _first_state(store: IncidentStore, event: AlertEvent, at: float) -> AlertEvent | None:
    """Write the state of a record just opened: this delivery's, then a resolve that came before
    it (the newer of the two holds). The resolve, when there was one."""
    applied = await store.apply(event.source, event.key, state_updates(event, at), remember=REMEMBERED)
    early = IncidentStore.early_resolve(applied.incident) if applied.incident else None
    if early is None:
        return None
    resolved_at, resolve = early
    closing = AlertEvent.model_validate_json(resolve)
    await store.apply(event.source, event.key, state_updates(closing, resolved_at), remember=REMEMBERED)
    return closing


async def _follow_status(svc: ThreadDeps, client: AsyncWebClient, event: AlertEvent, record: Incident, *,
                         status_changed: bool) -> str:
    """Say a resolve (or a fire after one) in the thread; what this delivery was."""
    if status_changed and record.status == "resolved":
        await close_thread(svc, client, event, record)
        return "resolved"
    if status_changed:
        await _post(client, record.channel, record.ts, ":rotating_light: Firing again.")
        return "firing-again"
    if event.status == "resolved":
        return "repeat-resolved"
    if not event.change:  # Alertmanager and Cloud Monitoring send a firing incident again: it still fires
        return "repeated"
    return event.change


async def close_thread(svc: ThreadDeps, client: AsyncWebClient, event: AlertEvent, record: Incident) -> None:
    """The incident resolved: say so in its thread, and let later incidents cite it."""
    team = await team_of(client)
    await svc.memory.end(team, record.channel, record.ts)  # now citable when it comes back
    await _post(client, record.channel, record.ts, resolved_text(event, record.opened))
    await svc.audit.record(actor=ALERT_ACTOR, action="alert", team=team, channel=record.channel,
                           outcome="resolved", detail=f"{event.source} {event.title}")


async def refresh_root(svc: ThreadDeps, client: AsyncWebClient, store: IncidentStore, source: str, key: str) -> None:
    """Edit the thread's first message to the record as it is now, again if it changed meanwhile."""
    for _ in range(RENDER_TRIES):
        record = await store.get(source, key)
        if record is None or not record.ts:
            return
        await client.chat_update(channel=record.channel, ts=record.ts, text=root_text(record, svc.redactor))
        if await store.version(source, key) == record.version:
            return


async def page_once(svc: IncidentDeps, client: AsyncWebClient, store: IncidentStore, record: Incident, reason: str, *,
                    in_thread: bool) -> bool:
    """Page the channel's on-call for an incident that pages now, unless it paged before, is
    acknowledged (someone has it) or resolved, or nobody is on call. An incident opened by a
    delivery that pages is paged by its first message; one that comes to page later, by a reply
    in its thread (`in_thread`: an edited message notifies nobody)."""
    if record.fields.get("paged") or record.status == "resolved" or record.fields.get("acknowledged") == "1":
        return False
    team = await team_of(client)
    mentions = await oncall_mentions(svc, team, record.channel)
    if not mentions or not await store.claim_page(record.source, record.key, mentions, reason):
        return False
    if in_thread:
        try:
            await client.chat_postMessage(channel=record.channel, thread_ts=record.ts, text=page_text(mentions, reason, svc.redactor),
                                          unfurl_links=False, unfurl_media=False)
        except BaseException:
            await store.unclaim_page(record.source, record.key)  # a retry of this job pages
            raise
    return True


async def open_incident(svc: Services, client: AsyncWebClient, store: IncidentStore, event: AlertEvent,
                        channel: str, reason: str, *, closing: AlertEvent | None = None) -> JobOutcome:
    """Post the thread of a record just opened, page, and investigate; `closing`: a resolve that
    came first, said in the thread once the investigation is there."""
    team = await team_of(client)
    try:
        record = await store.get(event.source, event.key)
        if record is None:
            raise IncidentBusy(event.key)
        if reason and await page_once(svc, client, store, record, reason, in_thread=False):
            record = await store.get(event.source, event.key) or record
        response = await client.chat_postMessage(channel=channel, text=root_text(record, svc.redactor),
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
    resolved = await store.get(event.source, event.key)
    if closing is not None and resolved is not None and resolved.status == "resolved":
        await close_thread(svc, client, closing, resolved)
        return JobOutcome.ok("opened, resolved")
    return JobOutcome.ok("opened")


async def investigate(svc: Services, client: AsyncWebClient, event: AlertEvent, *, team: str, channel: str,
                      thread_ts: str) -> None:
    """The alert's logs, digested and answered in its thread; the thread is never left at the status line."""
    reply = ThreadReply(client, channel=channel, thread_ts=thread_ts, team=team, user="", redactor=svc.redactor)
    await reply.post_status()
    try:
        reply.redactor = await run_redactor(svc)
        run_context = RunContext(Actor(user_id=ALERT_ACTOR, team=team, channel=channel), reply.redactor)
        logs = await read_alert_logs(svc, run_context, resource_type=event.resource_type,
                                     resource_labels=event.resource_labels, window=log_window(event))
        await recall_and_remember(svc, client, event.title, logs.lines, redactor=reply.redactor, team=team,
                                  channel=channel, thread_ts=thread_ts)
        builder = MentionBuilder(request=INVESTIGATE_REQUEST)
        builder.add("thread", alert_context(event))
        builder.add("Cloud Logging", list(logs.lines))
        if logs.problem:
            builder.notes.append(f"No logs were read: {logs.problem}")
        with builder.build() as mention:
            run = await run_agent(svc, run_context, mention, reply)
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


async def report_folded(client: AsyncWebClient, store: IncidentStore, job: FoldJob) -> JobOutcome:
    """Post, or edit, the storm message of the route's window for one severity, with what each source folded."""
    if job.source and not job.route:  # queued before storms were counted per route: its counts are not kept any more
        return JobOutcome.skipped("storm counted per source", bare=True)
    route = job.route or f"*:{job.channel}"
    claimed, posted_channel, ts = await store.claim_storm_message(route, job.severity, job.window, job.channel,
                                                                  int(job.storm_window * 2))
    if not claimed and not ts:
        raise IncidentBusy(f"the storm message of {route}")  # another job is posting it: edit it once it is there
    count, by_source = await store.folded(route, job.severity, job.window)  # read after the claim: the newest count
    text = storm_text(route, job.severity, count, by_source, job.storm_threads, job.storm_window)
    if not claimed:
        await client.chat_update(channel=posted_channel, ts=ts, text=text)
        return JobOutcome.ok(f"updated {count}")
    try:
        response = await client.chat_postMessage(channel=job.channel, text=text, unfurl_links=False, unfurl_media=False)
    except BaseException:
        await store.release_storm_message(route, job.severity, job.window, job.channel)  # a retry of this job posts it
        raise
    await store.set_storm_message(route, job.severity, job.window, job.channel, response["ts"])
    return JobOutcome.ok(f"posted {count}")


def log_window(event: AlertEvent, now: datetime | None = None) -> tuple[datetime, datetime]:
    now = now or datetime.now(timezone.utc)
    start = (event.started_at - LOG_LEAD) if event.started_at else now - DEFAULT_LOOKBACK
    end = max(event.ended_at or now, start + timedelta(minutes=1))
    return start, end


async def oncall_mentions(svc: IncidentDeps, team: str, channel: str) -> list[str]:
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
