"""Follow-ups (issue 32): a plain reply — no mention — in a thread the bot started (an incident)
or answered (a mention) is answered like a mention, with the thread as its context.

The web process decides from the event and Redis alone (no Slack call before the ack): a reply
by a person, in a thread, not mentioning the bot (app_mention answers that one), in a channel
the bot was not removed from, in a thread it follows (infra/state/conversations.py) that is younger
than FOLLOWUP_MAX_AGE. "stop" (or "thanks, done") ends the following; "fixed by …" in an
incident's thread ends the incident in the bot's memory (infra/state/incident_memory.py). The worker then checks
that the person is a member of the channel (conversations.members) before answering: a public
channel's thread can be read by people who never joined it.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.context import Services, ThreadDeps
from handlers import mention_job
from handlers.mention_job import ANSWER_JOB, MentionJob
from infra.jobs import JobOutcome, JobSpec
from handlers.notifier import slack_error
from infra.state.conversations import Membership

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class FollowupJob(MentionJob):
    """A follow-up reply: answered as a mention when `ack` is "", else acknowledged ("stop", "fixed")."""

    ack: str = ""

    @classmethod
    def of(cls, mention: MentionJob, ack: str) -> FollowupJob:
        return cls(**ANSWER_JOB.to_kwargs(mention), ack=ack)


FOLLOWUP_JOB = JobSpec("answer_followup", FollowupJob)
REPLY_SUBTYPES = (None, "thread_broadcast", "file_share")  # a person's reply; edits, joins and deletions are not
STOP = re.compile(r"^(?:please )?(?:stop(?: following)?|(?:thanks|thank you|ty),? (?:we're |i'm )?done|"
                  r"done,? (?:thanks|thank you)|that'?s all,? (?:thanks|thank you))$")
MEMBERS_PAGE = 200
MEMBERS_PAGES = 25  # 5,000 members read at most
FIXED = re.compile(r"^\s*fixed (?:by|with)\b", re.IGNORECASE)
ACK_TEXTS = {"stop": ":wave: OK, I stopped following this thread. Mention me to bring me back.",
             "fixed": ":memo: Noted. When an incident with these logs comes back, I will point to this fix.",
             "correction": ":memo: Kept with your :-1: as what the answer should have said "
                           "(`tpubot feedback --export-evals DIR` makes it an eval case)."}


def is_stop(text: str) -> bool:
    return bool(STOP.match(" ".join(re.sub(r"[!.?]+", " ", text.lower()).split())))


async def followup_kind(svc: ThreadDeps, body: dict, event: dict, bot_user_id: str,
                        now: float | None = None) -> Literal["answer", "stop", "fixed", "correction", ""]:
    """What a `message` event is to the follow-ups: one to answer, a stop, a fix noted, or nothing."""
    followups = svc.followups
    thread_ts, ts = str(event.get("thread_ts") or ""), str(event.get("ts") or "")
    if not thread_ts or thread_ts == ts or event.get("subtype") not in REPLY_SUBTYPES:
        return ""
    if bot_user_id and f"<@{bot_user_id}" in event.get("text", ""):
        return ""  # a mention: app_mention answers it
    try:
        age = (time.time() if now is None else now) - float(thread_ts)
    except ValueError:
        return ""
    if age > followups.max_age_seconds:
        return ""
    team, channel = body.get("team_id") or event.get("team", ""), str(event.get("channel") or "")
    if await svc.membership.status(team, channel) == Membership.OUT:
        return ""
    if not await followups.following(team, channel, thread_ts):
        return ""
    if await svc.feedback.take_correction(
            team, channel, thread_ts, str(event.get("user")), svc.redactor(str(event.get("text") or ""))):
        return "correction"  # what the answer it rated 👎 should have said, kept for an eval case
    if FIXED.match(event.get("text") or "") and await svc.memory.end(
            team, channel, thread_ts, fixed_by=" ".join(str(event.get("text")).split())):
        return "fixed"  # an incident thread's fix, kept for the next time its logs come back
    if is_stop(event.get("text") or ""):
        await followups.stop(team, channel, thread_ts)
        await svc.audit.record(actor=str(event.get("user")), action="followups", team=team, channel=channel,
                                    outcome="stopped", detail=thread_ts)
        return "stop"
    return "answer"


async def answer_followup(svc: Services, client: AsyncWebClient, job: FollowupJob) -> JobOutcome:
    """The worker: a member's follow-up answered as a mention (handlers/mention_job.py), or a stop
    or a fix acknowledged (`ack`)."""
    if not await is_member(client, job.channel, job.user):
        return JobOutcome.skipped("not-a-member", bare=True)
    if job.ack in ACK_TEXTS:
        await client.chat_postMessage(channel=job.channel, thread_ts=job.thread_ts, text=ACK_TEXTS[job.ack],
                                      unfurl_links=False, unfurl_media=False)
        return JobOutcome.ok(job.ack)
    return await mention_job.answer_mention(svc, client, job)


async def is_member(client: AsyncWebClient, channel: str, user: str) -> bool:
    cursor = None
    for _ in range(MEMBERS_PAGES):
        try:
            response = await client.conversations_members(channel=channel, limit=MEMBERS_PAGE, cursor=cursor)
        except SlackApiError as error:
            log.warning("conversations.members failed (%s); the follow-up is not answered", slack_error(error))
            return False
        if user in (response.get("members") or []):
            return True
        cursor = (response.get("response_metadata") or {}).get("next_cursor")
        if not cursor:
            return False
    return False
