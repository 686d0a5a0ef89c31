"""The worker side of a mention: gather the logs (paste, files, thread), run the agent, write
the reply in the thread and post one confirm card per proposal."""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisError
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.context import Actor, Services
from agent.digest import lines_from_bytes
from agent.llm.loop import run_agent
from agent.llm.material import MentionInput, build_mention, unescape_slack
from handlers.proposal_buttons import proposal_card
from handlers.thread_reply import ThreadReply
from infra.slack_files import MAX_LOG_FILE_BYTES, SlackFileError, download_slack_file

log = logging.getLogger(__name__)

ANSWER_JOB = "answer_mention"
MAX_FILES = 5
MAX_FILE_BYTES = MAX_LOG_FILE_BYTES
THREAD_MESSAGES = 15  # conversations.replies is limited to 15 per page for new apps (slack.md §3)
NOT_TEXT = ("image/", "video/", "audio/")


def job_id(team: str, channel: str, ts: str) -> str:
    return f"mention:{team}:{channel}:{ts}"


async def answer_mention(services: Services, client: AsyncWebClient, *, team: str, channel: str, ts: str,
                         thread_ts: str, user: str, text: str, files: list[dict], bot_user_id: str,
                         notes: list[str] | None = None, status_ts: str = "") -> str:
    # status_ts: jobs queued by web processes older than this one carry the status line they posted.
    reply = ThreadReply(client, channel=channel, thread_ts=thread_ts, team=team, user=user, status_ts=status_ts)
    try:
        await reply.post_status()
        mention = await gather_input(client, channel=channel, ts=ts, thread_ts=thread_ts, text=text,
                                     files=files, bot_user_id=bot_user_id, notes=notes or [])
        run = await run_agent(services, Actor(user_id=user, team=team, channel=channel), mention, reply)
        if run.used_model and mention.notes:
            # The model-less summary lists the notes itself; with a model they ride on the label.
            run.label = " · ".join([run.label, *mention.notes])
        # Cards go in before the answer is marked finished (the answer stays above them: the
        # stream or the status line it replaces was posted first).
        for proposal in run.proposals:
            card_text, blocks = proposal_card(proposal)
            await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=card_text, blocks=blocks,
                                          unfurl_links=False, unfurl_media=False)
        await reply.finish(run)
        return "model" if run.used_model else "no-model"
    except RedisError:
        log.exception("state store unavailable while answering a mention")
        await reply.fail(":warning: The state store is unavailable, so I could not answer. Nothing changed.")
        return "failed"
    except Exception as error:  # the thread must never be left at "Reading your message…"
        log.exception("answering a mention failed")
        await reply.fail(f":warning: Something went wrong while answering ({type(error).__name__}). Nothing changed.")
        return "failed"


async def gather_input(client: AsyncWebClient, *, channel: str, ts: str, thread_ts: str, text: str,
                       files: list[dict], bot_user_id: str, notes: list[str] = ()) -> MentionInput:
    builder = build_mention(text)
    builder.notes.extend(notes)
    sync_client = WebClient(token=client.token, base_url=client.base_url, timeout=10)
    for info in files[:MAX_FILES]:
        name = str(info.get("name") or info.get("id"))
        if str(info.get("mimetype", "")).startswith(NOT_TEXT):
            builder.notes.append(f"Skipped {name}: not a text file.")
            continue
        try:
            downloaded = await asyncio.to_thread(download_slack_file, sync_client, info["id"], max_bytes=MAX_FILE_BYTES)
        except SlackFileError as error:
            builder.notes.append(f"Could not read {name}: {error}")
            continue
        builder.add(f"file {name}", lines_from_bytes(downloaded.data))
    if len(files) > MAX_FILES:
        builder.notes.append(f"Read the first {MAX_FILES} of {len(files)} files.")
    if thread_ts and thread_ts != ts:
        builder.add("thread", await thread_lines(client, channel, thread_ts, ts, bot_user_id, builder.notes))
    return builder.build()


async def thread_lines(client: AsyncWebClient, channel: str, thread_ts: str, ts: str, bot_user_id: str,
                       notes: list[str]) -> list[str]:
    try:
        response = await client.conversations_replies(channel=channel, ts=thread_ts, limit=THREAD_MESSAGES)
    except SlackApiError as error:
        notes.append(f"Could not read the earlier thread messages ({error.response.get('error')}).")
        return []
    lines: list[str] = []
    for message in response.get("messages", []):
        if message.get("ts") == ts:
            continue
        who = "tpubot" if message.get("user") == bot_user_id or message.get("bot_id") else f"<@{message.get('user')}>"
        for line in unescape_slack(message.get("text", "")).splitlines() or [""]:
            lines.append(f"{who}: {line}")
    return lines
