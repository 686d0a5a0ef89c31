"""@-mentions: `app_mention`, and `file_share` messages that mention the bot (a mention made
while sharing a file can arrive only as a `message` event, slack.md §1.3).

Slack gets its 200 once the answer is queued (process_before_response, handlers/slack_app.py):
if Redis cannot take the job the listener raises, Slack gets a 500 and retries the event
later, so an accepted mention is never lost. The listener drops repeats — Slack retries
(`X-Slack-Retry-Num`, same `event_id`, possibly on another replica) and edits (a new
`app_mention` with the same `ts`) — with first-seen markers in Redis on `event_id` and on
(channel, ts), set in the same atomic step that queues the answer as a worker job whose id is
derived from (team, channel, ts), so even a marker lost to a Redis failover cannot answer twice. The worker posts the
status line in the thread as its first step. Secrets are redacted before the text is stored
in the job.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError
from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext

from agent.context import MentionDeps, ThreadDeps
from agent.redact import redact_lines
from handlers import followups
from handlers.late_answers import LateAnswers, within_ack_budget
from handlers.mention_job import ANSWER_JOB, MentionJob, job_id

log = logging.getLogger(__name__)

MAX_TEXT = 40_000  # Slack's own message limit; anything longer is not a message


def register(app: AsyncApp, svc: MentionDeps) -> None:
    queueing: LateAnswers[int] = LateAnswers()

    @app.event("app_mention", middleware=[from_a_person])
    async def handle_app_mention(body: dict, event: dict, context: AsyncBoltContext) -> None:
        await accept_mention(svc, queueing, body, event, context.bot_user_id or "")

    @app.event({"type": "message", "subtype": "file_share"}, middleware=[from_a_person])
    async def handle_file_share(body: dict, event: dict, context: AsyncBoltContext) -> None:
        bot = context.bot_user_id or ""
        if bot and f"<@{bot}" in event.get("text", ""):
            await accept_mention(svc, queueing, body, event, bot)
        else:
            await accept_followup(svc, queueing, body, event, bot)

    @app.event("message", middleware=[from_a_person])
    async def handle_other_messages(body: dict, event: dict, context: AsyncBoltContext) -> None:
        # The message.* subscriptions deliver every message: a reply in a thread the bot follows is
        # answered (handlers/followups.py); the rest are acked and dropped.
        await accept_followup(svc, queueing, body, event, context.bot_user_id or "")


async def from_a_person(event: dict, ack: AsyncAck, next_: Callable[[], Awaitable[None]]) -> BoltResponse | None:
    """Listener middleware: a message of another bot (bolt drops only our own), or of no one, is
    acked and dropped: no one to answer, and two bots could loop."""
    if not event.get("user") or event.get("bot_id"):
        return await ack()
    await next_()
    return None


async def accept_followup(svc: MentionDeps, queueing: LateAnswers[int], body: dict, event: dict,
                          bot_user_id: str) -> None:
    kind = await followups.followup_kind(svc, body, event, bot_user_id)
    if kind:
        await accept_mention(svc, queueing, body, event, bot_user_id, follow=kind != "stop",
                             followup_ack="" if kind == "answer" else kind)


async def accept_mention(svc: MentionDeps, queueing: LateAnswers[int], body: dict, event: dict,
                         bot_user_id: str, *, follow: bool = True, followup_ack: str | None = None) -> None:
    """Queue the answer; raises RedisError when it cannot, or not within the ack budget, so Slack
    gets a 500 and retries later. A queueing that overruns the budget goes on: when it lands, the
    retry finds its markers and is dropped as a repeat. With `followup_ack` it is a follow-up
    (handlers/followups.py): answered as a mention when "", else acknowledged."""
    team = body.get("team_id") or event.get("team", "")
    channel, ts = event.get("channel", ""), event.get("ts", "")
    if not channel or not ts:
        return
    files = [{"id": f.get("id"), "name": f.get("name", ""), "mimetype": f.get("mimetype", "")}
             for f in event.get("files") or [] if f.get("id")]
    raw, notes = read_text(event.get("text") or "")
    text = "\n".join(redact_lines(raw.split("\n")))
    markers = delivery_markers(body, team, channel, ts)
    mention = MentionJob(team=team, channel=channel, ts=ts, thread_ts=event.get("thread_ts") or ts,
                         user=event.get("user", ""), text=text, files=files, bot_user_id=bot_user_id, notes=notes)
    answer_id, seen = job_id(team, channel, ts), [svc.dedupe.marker(kind, value) for kind, value in markers]
    ttl = svc.dedupe.ttl_seconds
    queued = (svc.jobs.enqueue_first_delivery(ANSWER_JOB, mention, job_id=answer_id, markers=seen, marker_ttl=ttl)
              if followup_ack is None else
              svc.jobs.enqueue_first_delivery(followups.FOLLOWUP_JOB, followups.FollowupJob.of(mention, followup_ack),
                                                   job_id=answer_id, markers=seen, marker_ttl=ttl))
    # Markers and job in one atomic step: a delivery is never marked seen without its job.
    # The worker posts the status line first thing, so the web process makes no Slack call.
    outcome = await within_ack_budget(queueing, queued, _queued_late, not_done="the answer was not queued")
    if outcome == 0 and follow:
        await follow_thread(svc, team, channel, event.get("thread_ts") or ts)
    if outcome > 0:
        kind = markers[outcome - 1][0]
        await svc.audit.record(actor=event.get("user", ""), action="mention", team=team, channel=channel,
                                    outcome=f"duplicate_{kind}", detail=body.get("event_id", "") if kind == "event" else ts)


async def follow_thread(svc: ThreadDeps, team: str, channel: str, thread_ts: str) -> None:
    """The thread the bot is about to answer in: a plain reply there is a follow-up. The answer is
    queued already, so a state store that fails here costs the follow-ups, not the answer."""
    try:
        await svc.followups.follow(team, channel, thread_ts)
    except RedisError as error:
        log.warning("could not mark thread %s:%s followed (%s)", channel, thread_ts, type(error).__name__)


async def _queued_late(outcome: int) -> None:
    log.info("a mention's answer was queued after its ack budget (outcome %d); Slack's retry is a repeat", outcome)


def read_text(raw: str) -> tuple[str, list[str]]:
    """The part of a mention that is read — whole lines, at most MAX_TEXT characters — and a note
    saying how much of it that is when it is not all."""
    if len(raw) <= MAX_TEXT:
        return raw, []
    kept = raw[:MAX_TEXT]
    if "\n" in kept:
        kept = kept[: kept.rfind("\n")]  # a cut line would be a wrong line to cite
    read, total = kept.count("\n") + 1, raw.count("\n") + 1
    return kept, [f"Your message is {len(raw):,} characters, more than the {MAX_TEXT:,} I read: I read its first "
                  f"{read:,} of {total:,} lines, and nothing after line {read:,}. Attach long logs as a file "
                  "to have them all read."]


def delivery_markers(body: dict, team: str, channel: str, ts: str) -> list[tuple[str, str]]:
    """A retry repeats the event_id; an edit or a file_share copy repeats (channel, ts)."""
    event_id = body.get("event_id", "")
    return [("event", event_id)] * bool(event_id) + [("message", f"{team}:{channel}:{ts}")]
