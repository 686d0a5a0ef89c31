"""The in-process tier's bot (README "Tests"): our code called directly, with the emulated Slack,
cloud and model it talks to, and no web server or worker thread of ours.

A mention goes where the web process's listener sends it (`handlers.mentions.accept_mention`), a
`/tpu` command to `handlers.slash.answer_command`, each as Slack sends it (`infra.sandbox.slack_requests`
builds them for both tiers). The worker (`bot.worker.build_worker`, the one the Procfile runs) then
takes what was queued in burst mode: it runs every job to its end and stops. A test reads the
replies from the same Slack stand-in as on a LocalStack, and `mention()` and `slash()` return only
once they are all there, so nothing races the test. A job that defers another (a lease's expiry
timer) keeps a burst worker running: a lease that reaches ACTIVE is the end-to-end tier's.

What this leaves out is bolt over HTTP (signatures, acks, the routing of event types) and a worker
that runs beside the web; the end-to-end files keep those (test_agent_mentions, test_hostile_input,
test_slack_conformance, test_slack_lifecycle)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from bot.local_stack import LocalStack
from bot.worker import build_worker
from bot.wiring import build_services, slack_client_from
from agent.context import Services
from handlers.late_answers import LateAnswers
from handlers.mentions import accept_mention
from handlers.slash import answer_command
from infra.sandbox.slack_api import BOT_USER_ID, SlackApiSandbox
from infra.sandbox.slack_requests import event_callback, mention_event, slash_command

T = TypeVar("T")

# A burst worker runs until the queue is empty; a job that keeps re-queuing itself would keep it
# running, so the test fails with this rather than hangs.
DRAIN_TIMEOUT = 60.0


@dataclass
class InProcessBot:
    stack: LocalStack  # the emulators and the settings pointed at them; no web app, no worker thread
    team: str = "T0SANDBOX"

    @property
    def slack(self) -> SlackApiSandbox:
        assert self.stack.slack is not None, "the in-process bot records replies in its Slack stand-in"
        return self.stack.slack

    @property
    def redis_url(self) -> str:
        assert self.stack.redis is not None
        return self.stack.redis.url

    def mention(self, text: str, *, user: str, channel: str, ts: str | None = None, thread_ts: str | None = None,
                files: list[dict] | None = None) -> None:
        """An `app_mention` as the listener takes it, then the worker's answer."""
        event = mention_event(text, team=self.team, user=user, channel=channel, ts=ts, thread_ts=thread_ts, files=files)
        asyncio.run(self._accept(event_callback(event, team=self.team, bot_user_id=BOT_USER_ID), event))
        asyncio.run(self._drain())

    def slash(self, text: str, *, user: str, channel: str) -> str:
        """`/tpu {text}` as the listener answers it (the ack's text), then the worker's jobs."""
        command = slash_command(text, team=self.team, user=user, channel=channel,
                                response_url=self.slack.response_url("commands"))
        ack, _blocks = asyncio.run(self._listen(lambda svc: answer_command(svc, command)))
        asyncio.run(self._drain())
        return ack

    async def _accept(self, body: dict, event: dict) -> None:
        await self._listen(lambda svc: accept_mention(svc, LateAnswers(), body, event, BOT_USER_ID))

    async def _listen(self, listener: Callable[[Services], Awaitable[T]]) -> T:
        """A listener's work on the services the web process builds (bot/web.py)."""
        services, redis, pool = await build_services(self.stack.settings, redis_url=self.redis_url,
                                                     slack_client=slack_client_from(self.stack.settings))
        try:
            return await listener(services)
        finally:
            await pool.aclose()
            await redis.aclose()

    async def _drain(self) -> None:
        worker = build_worker(self.stack.settings, redis_url=self.redis_url, burst=True, handle_signals=False)
        try:
            await asyncio.wait_for(worker.async_run(), DRAIN_TIMEOUT)
        finally:
            await worker.close()
        assert not worker.jobs_failed, f"{worker.jobs_failed} job(s) failed; the worker's log says which"
