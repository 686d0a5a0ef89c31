"""The worker side of a mention: gather the logs (paste, files, thread), run the agent, write
the reply in the thread and post one confirm card per proposal.

An attached file streams from Slack through gunzip, decoding and redaction onto a line spool
(agent/digest/spool.py) in a worker thread, so its size does not decide the job's memory; the
spools are closed when the job ends, whatever the outcome.

Whether a file is an image is told by its first bytes, not its name or Slack's mimetype: an image
is read whole (capped at MAX_IMAGE_BYTES), checked and resized for Gemma 4 (infra/images.py) in the
same worker thread, one at a time, and only the small resized copy is kept. Images count newest
first: the mention's own, then those earlier in the thread from the latest message back, up to the
endpoint's per-prompt limit; the rest are named as not read and not downloaded."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
import logging
import tempfile
from collections.abc import Sequence

from redis.exceptions import RedisError
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.actions.run_context import RunContext
from agent.context import Actor, Services
from agent.digest import LineSpool, estimate_tokens, lines_from_chunks
from agent.llm.loop import run_agent
from agent.llm.material import (
    MentionBuilder,
    MentionInput,
    build_mention,
    images_read_line,
    spool_file_lines,
    unescape_slack,
    unread_warnings,
)
from agent.actions.model_endpoint import run_redactor
from handlers.feedback_buttons import offer_feedback
from handlers.incident_recall import recall_and_remember
from handlers.notifier import UNREACHABLE, slack_error
from handlers.proposal_buttons import proposal_card
from handlers.thread_reply import ThreadReply
from infra.images import MAX_IMAGE_BYTES, ImageError, PreparedImage, looks_like_image, prepare_image
from infra.jobs import JobOutcome, JobSpec
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
NOT_TEXT = ("video/", "audio/")
IMAGE_TYPE = "image/"
THREAD_IMAGES = 10  # image files of earlier thread messages considered at most (newest first)


def job_id(team: str, channel: str, ts: str) -> str:
    return f"mention:{team}:{channel}:{ts}"


async def answer_mention(svc: Services, client: AsyncWebClient, job: MentionJob) -> JobOutcome:
    reply = ThreadReply(client, channel=job.channel, thread_ts=job.thread_ts, team=job.team, user=job.user,
                        status_ts=job.status_ts, redactor=svc.redactor)
    mention: MentionInput | None = None
    try:
        try:
            await reply.post_status()
        except SlackApiError as error:
            if slack_error(error) not in UNREACHABLE:
                raise
            # The mention came from a conversation the bot cannot post in: tell the person directly.
            await client.chat_postMessage(channel=job.user, text=cant_answer_text(job.channel), unfurl_links=False,
                                          unfurl_media=False)
            return JobOutcome.failed("not_in_channel", bare=True)  # told the person directly
        mention = await gather_input(client, channel=job.channel, ts=job.ts, thread_ts=job.thread_ts, text=job.text,
                                     files=job.files, bot_user_id=job.bot_user_id, notes=job.notes or [],
                                     max_images=svc.model.max_images)
        # One redactor for the run, knowing the live lease keys: the prompt, the tool results and
        # every piece of the reply pass through it.
        reply.redactor = await run_redactor(svc)
        actor = Actor(user_id=job.user, team=job.team, channel=job.channel)
        run = await run_agent(svc, RunContext(actor, reply.redactor), mention, reply)
        read_images = images_read_line(mention)
        if run.used_model and (mention.notes or read_images):
            # What was not read qualifies the answer, so it leads it ("no errors" of a message cut at
            # Slack's limit is not a clean bill), and so does which images the model saw; the
            # model-less answer puts its own lines first itself.
            run.text = "\n\n".join([*unread_warnings(mention), *([read_images] if read_images else []), run.text])
        # Cards go in before the answer is marked finished (the answer stays above them: the
        # stream or the status line it replaces was posted first).
        for proposal in run.proposals:
            card_text, blocks = proposal_card(proposal)
            await client.chat_postMessage(channel=job.channel, thread_ts=job.thread_ts, text=card_text, blocks=blocks,
                                          unfurl_links=False, unfurl_media=False)
        await reply.finish(run)
        if mention.has_logs:  # an incident of its own: remembered, and recognised when it comes back
            # The answer mined the lines already (the prompt's or the model-less digest): not again.
            await recall_and_remember(svc, client, mention.request or "logs pasted in a mention",
                                      mention.mined, redactor=reply.redactor, team=job.team, channel=job.channel,
                                      thread_ts=job.thread_ts)
        await offer_feedback(svc, client, reply, run, mention)
        return JobOutcome.ok("model" if run.used_model else "no-model")
    except RedisError:
        log.exception("state store unavailable while answering a mention")
        await reply.fail(":warning: The state store is unavailable, so I could not answer. Nothing changed.")
        return JobOutcome.failed()
    except Exception as error:  # the thread must never be left at "Reading your message…"
        log.exception("answering a mention failed")
        await reply.fail(f":warning: Something went wrong while answering ({type(error).__name__}). Nothing changed.")
        return JobOutcome.failed()
    finally:
        if mention is not None:
            mention.close()  # the files' spools


async def gather_input(client: AsyncWebClient, *, channel: str, ts: str, thread_ts: str, text: str,
                       files: list[dict], bot_user_id: str, notes: Sequence[str] = (),
                       max_images: int = 4) -> MentionInput:
    """The mention's material; the caller closes it. On an error nothing is left open."""
    builder = build_mention(text)
    builder.notes.extend(notes)
    unread_images: list[str] = []
    try:
        sync_client = WebClient(token=client.token, base_url=client.base_url, timeout=10)
        for info in files[:MAX_FILES]:
            await _read_attachment(sync_client, info, builder, max_images, unread_images)
        if len(files) > MAX_FILES:
            builder.notes.append(f"Read the first {MAX_FILES} of {len(files)} files.")
        if thread_ts and thread_ts != ts:
            thread_images: list[dict] = []
            builder.add("thread", await thread_lines(client, channel, thread_ts, ts, bot_user_id, builder.notes,
                                                     thread_images))
            for info in thread_images:
                await _read_attachment(sync_client, info, builder, max_images, unread_images)
        if unread_images:
            builder.notes.append(f"Not read: {', '.join(unread_images)}: the model takes at most {max_images} "
                                 f"image{'s' * (max_images != 1)} per message (--limit-mm-per-prompt), newest first.")
    except BaseException:
        builder.close()
        raise
    return builder.build()


async def _read_attachment(client: WebClient, info: dict, builder: MentionBuilder, max_images: int,
                           unread_images: list[str]) -> None:
    """One file into the builder: an image, a log spool, or a note saying why it was not read."""
    name = str(info.get("name") or info.get("id"))
    mimetype = str(info.get("mimetype", ""))
    if mimetype.startswith(NOT_TEXT):
        builder.notes.append(f"Skipped {name}: not a text file or an image.")
        return
    if mimetype.startswith(IMAGE_TYPE) and len(builder.images) >= max_images:
        unread_images.append(name)  # not downloaded: it would not be sent
        return
    # Made here, not in the thread: a cancelled job closes it, and the thread stops writing.
    spool = LineSpool()
    try:
        image = await asyncio.to_thread(read_slack_file, client, info["id"], spool, name=name,
                                        said_image=mimetype.startswith(IMAGE_TYPE),
                                        take_image=len(builder.images) < max_images)
    except (SlackFileError, ImageError) as error:
        spool.close()
        builder.notes.append(f"Could not read {name}: {error}" if isinstance(error, SlackFileError) else f"{error}.")
        return
    except BaseException:
        spool.close()
        raise
    if image is NOT_TAKEN:
        spool.close()
        unread_images.append(name)
    elif isinstance(image, PreparedImage):
        spool.close()
        builder.images.append(image)
    else:
        builder.add_spool(f"file {name}", spool)


NOT_TAKEN = object()  # an image over the per-prompt limit: recognised, not decoded


def read_slack_file(client: WebClient, file_id: str, spool: LineSpool, *, name: str, said_image: bool = False,
                    take_image: bool = True) -> object:
    """One attached file, told apart by its first bytes (blocking: run it in a thread). An image is
    downloaded to a temporary file (at most MAX_IMAGE_BYTES) and returned resized; past the image limit (`take_image`
    False) it is NOT_TAKEN; anything else goes onto `spool` as log lines and None is returned.
    Raises SlackFileError or ImageError."""
    cap = MAX_IMAGE_BYTES if said_image else MAX_FILE_BYTES
    with open_slack_file(client, file_id, max_bytes=cap) as download:
        head = next(download.chunks, b"")
        if looks_like_image(head):
            if not take_image:
                return NOT_TAKEN
            # Onto disk, not the heap: Pillow reads the file back in pieces while it decodes.
            with tempfile.TemporaryFile() as spooled:
                size = 0
                for chunk in itertools.chain([head], download.chunks):
                    size += len(chunk)
                    if size > MAX_IMAGE_BYTES:
                        raise ImageError(f"{name} is larger than the {MAX_IMAGE_BYTES:,}-byte limit for an image")
                    spooled.write(chunk)
                return prepare_image(name, spooled)
        if said_image:
            # Slack calls it an image (by its name), its content says otherwise: not read as a log either.
            raise ImageError(f"{name} is not an image: its content is not PNG, JPEG, WebP, GIF or BMP, whatever "
                             "its name says; not read")
        spool_file_lines(spool, lines_from_chunks(itertools.chain([head], download.chunks)))
        return None


def cant_answer_text(channel: str) -> str:
    return (f":warning: I can't post in <#{channel}>, so I could not answer your mention there. "
            f"Invite me with `/invite @tpubot` in <#{channel}> and mention me again.")


async def thread_lines(client: AsyncWebClient, channel: str, thread_ts: str, ts: str, bot_user_id: str,
                       notes: list[str], image_files: list[dict] | None = None) -> list[str]:
    """The thread's root and the messages just above the mention, newest kept first, within
    THREAD_TOKENS. conversations.replies pages oldest first (15 a page for new apps), so the
    newest messages are on the last page: every page up to the mention is read. The image files
    posted in the thread go to `image_files`, newest message first (at most THREAD_IMAGES)."""
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
    if image_files is not None:
        image_files.extend([f for m in reversed(messages) for f in m.get("files") or []
                            if str(f.get("mimetype", "")).startswith(IMAGE_TYPE)][:THREAD_IMAGES])
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
