"""Seen before: an incident thread (an alert's or a mention's with logs) is remembered by its
digest's top templates, and one whose top templates match an ended incident says so, with how
that one was fixed and a link to its thread (infra/state/incident_memory.py keeps them)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from datetime import datetime, timezone

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.redact import Redactor
from agent.context import ThreadDeps
from agent.digest import DigestBuilder, mine
from handlers.cards import escape
from infra.state.incident_memory import Remembered, signature

log = logging.getLogger(__name__)

TOP_TEMPLATES = 3  # an incident is remembered, and recognised, by its digest's top templates


async def recall_and_remember(svc: ThreadDeps, client: AsyncWebClient, title: str, logs: Iterable[str] | DigestBuilder,
                              *, redactor: Redactor, team: str, channel: str, thread_ts: str) -> Remembered | None:
    """Say in the thread when an ended incident had the same top log templates, then keep this one.
    `logs`: lines, read lazily (a mention's spooled files), digested once, not held; or lines mined already."""
    signatures = await asyncio.to_thread(top_signatures, logs)
    if not signatures:
        return None
    seen = await svc.memory.recall(team, signatures, exclude=(channel, thread_ts))
    await svc.memory.observe(team, channel, thread_ts, signatures, title, time.time())
    if seen is not None:
        try:
            await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=seen_before_text(seen, redactor),
                                          unfurl_links=False, unfurl_media=False)
        except SlackApiError as error:
            log.warning("posting a seen-before note failed: %s", error.response.get("error"))
    return seen


def top_signatures(logs: Iterable[str] | DigestBuilder) -> list[str]:
    """The signatures of the digest's top templates: the most severe, then the most frequent."""
    ranked = (logs if isinstance(logs, DigestBuilder) else mine(logs)).summaries()
    top = sorted(ranked, key=lambda t: (-t.severity, -t.count, t.template))[:TOP_TEMPLATES]
    return [signature(t.template) for t in top]


def seen_before_text(seen: Remembered, redactor: Redactor) -> str:
    when = datetime.fromtimestamp(seen.at, tz=timezone.utc).strftime("%Y-%m-%d")
    fix = f", {escape(redactor(seen.fixed_by))}" if seen.fixed_by else ""
    link = f"https://slack.com/archives/{seen.channel}/p{seen.thread_ts.replace('.', '')}"
    return (f":brain: Seen before on {when} in <#{seen.channel}>{fix} ({seen.matched} of the top log templates "
            f"match): <{link}|that thread>.")
