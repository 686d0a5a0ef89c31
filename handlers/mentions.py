"""@-mentions: `app_mention`, and `file_share` messages that mention the bot (a mention made
while sharing a file can arrive only as a `message` event, slack.md §1.3).

Bolt acks events before the listener runs. The listener drops repeats — Slack retries
(`X-Slack-Retry-Num`, same `event_id`, possibly on another replica) and edits (a new
`app_mention` with the same `ts`) — with first-seen markers in Redis on `event_id` and on
(channel, ts), posts a status line in the thread at once, and queues the answer as a worker
job whose id is derived from (team, channel, ts), so even a marker lost to a Redis failover
cannot answer twice. Secrets are redacted before the text is stored in the job.
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.context import Services
from agent.material import redact_lines
from handlers.mention_job import ANSWER_JOB, job_id
from handlers.thread_reply import STATUS_TEXT

log = logging.getLogger(__name__)

MAX_TEXT = 40_000  # Slack's own message limit; anything longer is not a message


def register(app: AsyncApp, services: Services) -> None:
    @app.event("app_mention")
    async def handle_app_mention(body: dict, event: dict, context: AsyncBoltContext, client: AsyncWebClient) -> None:
        await accept_mention(services, client, body, event, context.bot_user_id or "")

    @app.event({"type": "message", "subtype": "file_share"})
    async def handle_file_share(body: dict, event: dict, context: AsyncBoltContext, client: AsyncWebClient) -> None:
        bot = context.bot_user_id or ""
        if bot and f"<@{bot}" in event.get("text", ""):
            await accept_mention(services, client, body, event, bot)

    @app.event("message")
    async def ignore_other_messages() -> None:
        # The message.* subscriptions deliver every message; all but the above are acked and dropped.
        return None


async def accept_mention(services: Services, client: AsyncWebClient, body: dict, event: dict, bot_user_id: str) -> None:
    team = body.get("team_id") or event.get("team", "")
    channel, ts = event.get("channel", ""), event.get("ts", "")
    if not channel or not ts:
        return
    try:
        if not await first_delivery(services, body, team, channel, ts):
            return
    except RedisError:
        log.exception("state store unavailable; mention %s:%s not answered", channel, ts)
        return
    thread_ts = event.get("thread_ts") or ts
    status_ts = ""
    try:
        status = await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=STATUS_TEXT,
                                               unfurl_links=False, unfurl_media=False)
        status_ts = status["ts"]
    except SlackApiError as error:
        log.warning("status line not posted: %s", error.response.get("error"))
    files = [{"id": f.get("id"), "name": f.get("name", ""), "mimetype": f.get("mimetype", "")}
             for f in event.get("files") or [] if f.get("id")]
    raw = event.get("text") or ""
    notes = []
    if len(raw) > MAX_TEXT:
        notes.append(f"Your message is {len(raw):,} characters; I read the first {MAX_TEXT:,}. "
                     "Attach long logs as a file instead.")
    text = "\n".join(redact_lines(raw[:MAX_TEXT].split("\n")))
    await services.jobs.enqueue(
        ANSWER_JOB, job_id=job_id(team, channel, ts), team=team, channel=channel, ts=ts, thread_ts=thread_ts,
        user=event.get("user", ""), text=text, files=files, status_ts=status_ts, bot_user_id=bot_user_id,
        notes=notes,
    )


async def first_delivery(services: Services, body: dict, team: str, channel: str, ts: str) -> bool:
    """False for a retry (same event_id) or an edit/second event of the same message (same ts)."""
    event_id = body.get("event_id", "")
    if event_id and not await services.dedupe.first_time("event", event_id):
        await services.audit.record(actor=body.get("event", {}).get("user", ""), action="mention", team=team,
                                    channel=channel, outcome="duplicate_event", detail=event_id)
        return False
    if not await services.dedupe.first_time("message", f"{team}:{channel}:{ts}"):
        await services.audit.record(actor=body.get("event", {}).get("user", ""), action="mention", team=team,
                                    channel=channel, outcome="duplicate_message", detail=ts)
        return False
    return True
