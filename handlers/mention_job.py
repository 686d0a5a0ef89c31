"""The worker side of a mention: gather the logs (paste, files, thread), run the agent, write
the reply in the thread and post one confirm card per proposal.

An attached file streams from Slack through gunzip, decoding and redaction onto a line spool
(agent/digest/spool.py) in a worker thread, so its size does not decide the job's memory; the
spools are closed when the job ends, whatever the outcome."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
import logging
from collections.abc import Sequence

from redis.exceptions import RedisError
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.context import Actor, Services
from agent.digest import LineSpool, estimate_tokens, lines_from_chunks
from agent.llm.loop import run_agent
from agent.llm.material import MentionInput, build_mention, spool_file_lines, unescape_slack, unread_warnings
from agent.actions.secret_values import run_redactor
from handlers.notifier import UNREACHABLE, slack_error
from handlers.proposal_buttons import proposal_card
from handlers.thread_reply import ThreadReply
from infra.jobs import JobSpec
from infra.slack_files import MAX_LOG_FILE_BYTES, SlackFileError, open_slack_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MentionJob:
    """One @-mention to answer, as the web process accepted it (its text already redacted)."""

    team: str
    channel: str
    ts: str
    thread_ts: str
    user: str
    text: str
    files: list[dict]  # id, name and mimetype of each attached file
    bot_user_id: str
    notes: list[str] = field(default_factory=list)  # what of the message was not read, said up front
    status_ts: str = ""  # jobs queued by web processes older than this one carry the status line they posted


ANSWER_JOB = JobSpec("answer_mention", MentionJob)
MAX_FILES = 5
MAX_FILE_BYTES = MAX_LOG_FILE_BYTES
THREAD_MESSAGES = 15  # conversations.replies is limited to 15 per page for new apps (slack.md §3)
THREAD_PAGES = 20  # at most 300 messages of a thread are read
THREAD_TOKENS = 3_000  # of earlier thread messages in the prompt (the logs get the rest)
NOT_TEXT = ("image/", "video/", "audio/")


def job_id(team: str, channel: str, ts: str) -> str:
    return f"mention:{team}:{channel}:{ts}"


async def answer_mention(services: Services, client: AsyncWebClient, *, team: str, channel: str, ts: str,
                         thread_ts: str, user: str, text: str, files: list[dict], bot_user_id: str,
                         notes: list[str] | None = None, status_ts: str = "") -> str:
    # status_ts: jobs queued by web processes older than this one carry the status line they posted.
    reply = ThreadReply(client, channel=channel, thread_ts=thread_ts, team=team, user=user, status_ts=status_ts,
                        redactor=services.redactor)
    mention: MentionInput | None = None
    try:
        try:
            await reply.post_status()
        except SlackApiError as error:
            if slack_error(error) not in UNREACHABLE:
                raise
            # The mention came from a conversation the bot cannot post in: tell the person directly.
            await client.chat_postMessage(channel=user, text=cant_answer_text(channel), unfurl_links=False,
                                          unfurl_media=False)
            return "not_in_channel"
        mention = await gather_input(client, channel=channel, ts=ts, thread_ts=thread_ts, text=text,
                                     files=files, bot_user_id=bot_user_id, notes=notes or [])
        # One redactor for the run, knowing the live lease keys: the prompt, the tool results and
        # every piece of the reply pass through it.
        reply.redactor = await run_redactor(services)
        services = dataclasses.replace(services, redactor=reply.redactor)
        run = await run_agent(services, Actor(user_id=user, team=team, channel=channel), mention, reply)
        if run.used_model and mention.notes:
            # What was not read qualifies the answer, so it leads it ("no errors" of a message cut at
            # Slack's limit is not a clean bill); the model-less answer puts them first itself.
            run.text = "\n\n".join([*unread_warnings(mention), run.text])
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
    finally:
        if mention is not None:
            mention.close()  # the files' spools


async def gather_input(client: AsyncWebClient, *, channel: str, ts: str, thread_ts: str, text: str,
                       files: list[dict], bot_user_id: str, notes: Sequence[str] = ()) -> MentionInput:
    """The mention's material; the caller closes it. On an error nothing is left open."""
    builder = build_mention(text)
    builder.notes.extend(notes)
    try:
        sync_client = WebClient(token=client.token, base_url=client.base_url, timeout=10)
        for info in files[:MAX_FILES]:
            name = str(info.get("name") or info.get("id"))
            if str(info.get("mimetype", "")).startswith(NOT_TEXT):
                builder.notes.append(f"Skipped {name}: not a text file.")
                continue
            # Made here, not in the thread: a cancelled job closes it, and the thread stops writing.
            spool = LineSpool()
            try:
                await asyncio.to_thread(spool_slack_file, sync_client, info["id"], spool)
            except SlackFileError as error:
                spool.close()
                builder.notes.append(f"Could not read {name}: {error}")
                continue
            except BaseException:
                spool.close()
                raise
            builder.add_spool(f"file {name}", spool)
        if len(files) > MAX_FILES:
            builder.notes.append(f"Read the first {MAX_FILES} of {len(files)} files.")
        if thread_ts and thread_ts != ts:
            builder.add("thread", await thread_lines(client, channel, thread_ts, ts, bot_user_id, builder.notes))
    except BaseException:
        builder.close()
        raise
    return builder.build()


def spool_slack_file(client: WebClient, file_id: str, spool: LineSpool) -> None:
    """One attached file onto `spool`: downloaded, gunzipped, decoded and redacted as it arrives
    (blocking: run it in a thread). Raises SlackFileError, with lines already spooled left to the caller."""
    with open_slack_file(client, file_id, max_bytes=MAX_FILE_BYTES) as download:
        spool_file_lines(spool, lines_from_chunks(download.chunks))


def cant_answer_text(channel: str) -> str:
    return (f":warning: I can't post in <#{channel}>, so I could not answer your mention there. "
            f"Invite me with `/invite @tpubot` in <#{channel}> and mention me again.")


async def thread_lines(client: AsyncWebClient, channel: str, thread_ts: str, ts: str, bot_user_id: str,
                       notes: list[str]) -> list[str]:
    """The thread's root and the messages just above the mention, newest kept first, within
    THREAD_TOKENS. conversations.replies pages oldest first (15 a page for new apps), so the
    newest messages are on the last page: every page up to the mention is read."""
    messages: list[dict] = []
    cursor = None
    for _ in range(THREAD_PAGES):
        try:
            response = await client.conversations_replies(channel=channel, ts=thread_ts, latest=ts, inclusive=False,
                                                          limit=THREAD_MESSAGES, cursor=cursor)
        except SlackApiError as error:
            notes.append(f"Could not read the earlier thread messages ({slack_error(error)}).")
            break
        page: list[dict] = response.get("messages", [])
        messages.extend(m for m in page if m.get("ts") != ts)
        cursor = (response.get("response_metadata") or {}).get("next_cursor")
        if not response.get("has_more") or not cursor:
            break
    else:
        notes.append(f"Read the first {THREAD_PAGES * THREAD_MESSAGES} messages of the thread.")
    if not messages:
        return []
    root, rest = messages[0], messages[1:]
    budget = THREAD_TOKENS - estimate_tokens("\n".join(_message_lines(root, bot_user_id)))
    kept: list[list[str]] = []
    for message in reversed(rest):  # newest first, until the budget is spent
        lines = _message_lines(message, bot_user_id)
        cost = estimate_tokens("\n".join(lines))
        if cost > budget:
            notes.append(f"Read the thread's first message and the {len(kept)} messages before yours "
                         f"(of {len(rest)}).")
            break
        budget -= cost
        kept.append(lines)
    return _message_lines(root, bot_user_id) + [line for lines in reversed(kept) for line in lines]


def _message_lines(message: dict, bot_user_id: str) -> list[str]:
    who = "tpubot" if message.get("user") == bot_user_id or message.get("bot_id") else f"<@{message.get('user')}>"
    return [f"{who}: {line}" for line in unescape_slack(message.get("text", "")).splitlines() or [""]]
