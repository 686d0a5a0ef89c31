"""The in-process tier's bot (README "Tests"): our code called directly, with the emulated Slack,
cloud and model it talks to, and no web server or worker thread of ours.

A signed request (`signed_requests()`, the same client the end-to-end tests use) goes to the bolt
app the web process builds (`handlers.slack_app.build_bolt_app`), dispatched in this process rather
than posted to `/slack/events`: bolt still checks the signature, runs the middleware and routes it
to our listener, and its ack is the reply. What the listeners queue is run by the worker the
Procfile runs (`bot.worker.build_worker`), in the test's own thread:
- `mention()` sends an `app_mention` and then runs the worker in burst mode: every queued job to its
  end, then it stops, so the answer is in the Slack stand-in when `mention()` returns;
- `until(predicate)` runs the worker as in production (deferred jobs, retries, timeouts) until the
  predicate holds, lets the jobs it started finish and stops it. A lease's lifecycle defers jobs
  for hours (its expiry timer), so a burst would never end there.

What this leaves out is our web server (bot/web.py: the request gate before bolt, the HTTP status
of what it refuses) and a worker that runs beside the web; the end-to-end files keep those
(test_agent_mentions, test_hostile_input, test_slack_conformance, test_slack_lifecycle)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from slack_bolt.async_app import AsyncBoltRequest

from bot.local_stack import LocalStack
from bot.worker import build_worker
from bot.wiring import build_services, slack_client_from
from handlers.slack_app import build_bolt_app
from infra.sandbox.slack_api import SlackApiSandbox
from infra.sandbox.slack_requests import SlackReply, SlackRequests
from waiting import wait_for

T = TypeVar("T")

# A burst worker runs until the queue is empty; a job that keeps re-queuing itself would keep it
# running, so the test fails with this rather than hangs.
DRAIN_TIMEOUT = 60.0
# How long a listener's work after its ack (bolt's lazy listeners, late answers) may take.
AFTER_ACK_TIMEOUT = 30.0


@dataclass
class InProcessBot:
    stack: LocalStack  # the emulators and the settings pointed at them; no web app, no worker thread

    def __getattr__(self, name: str) -> Any:
        # What a test reads from a LocalStack (its emulators, settings, Redis) reads the same here.
        return getattr(self.stack, name)

    @property
    def slack(self) -> SlackApiSandbox:
        assert self.stack.slack is not None, "the in-process bot records replies in its Slack stand-in"
        return self.stack.slack

    def signed_requests(self, team: str = "T0SANDBOX") -> SlackRequests:
        """Signed Slack requests, as to a LocalStack, handed to the bolt app in this process."""
        return SlackRequests("in-process", self.stack.signing_secret, team=team,
                             response_url_factory=self.slack.response_url,
                             transport=lambda body, headers: asyncio.run(self._dispatch(body, headers)))

    def mention(self, text: str, *, user: str, channel: str, **kwargs: Any) -> SlackReply:
        """An `app_mention` (SlackRequests.mention's arguments), then the worker's answer."""
        requests = self.signed_requests()
        try:
            reply = requests.mention(text, user=user, channel=channel, **kwargs)
        finally:
            requests.close()
        asyncio.run(self._drain())
        return reply

    def until(self, predicate: Callable[[], T], timeout: float = 60.0, what: str = "condition") -> T:
        """Run the worker until `predicate()` is truthy (polled as tests/waiting.py does), and return it."""
        return asyncio.run(self._work_until(predicate, timeout, what))

    async def _dispatch(self, body: str, headers: dict[str, str]) -> SlackReply:
        """One request through the bolt app the web process builds (bot/web.py), on its services."""
        settings = self.stack.settings
        services, redis, pool = await build_services(settings, redis_url=self.stack.redis.url,
                                                     slack_client=slack_client_from(settings))
        try:
            bolt = build_bolt_app(services, client=slack_client_from(settings),
                                  signing_secret=settings.slack_signing_secret.get_secret_value())
            response = await bolt.async_dispatch(AsyncBoltRequest(body=body, headers=headers))
            # What runs after the ack (lazy listeners, late answers) ends before its services close.
            after_ack = asyncio.all_tasks() - {asyncio.current_task()}
            if after_ack:
                _, running = await asyncio.wait(after_ack, timeout=AFTER_ACK_TIMEOUT)
                assert not running, f"work after the ack still running after {AFTER_ACK_TIMEOUT} s: {running}"
            return SlackReply(response.status, response.body)
        finally:
            await pool.aclose()
            await redis.aclose()

    async def _work_until(self, predicate: Callable[[], T], timeout: float, what: str) -> T:
        worker = build_worker(self.stack.settings, redis_url=self.stack.redis.url, handle_signals=False)
        running = asyncio.ensure_future(worker.async_run())
        waiting = asyncio.ensure_future(wait_for(predicate, timeout, what=what))
        try:
            await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():
                running.result()  # the worker's own error, if it raised one
                raise AssertionError(f"the worker stopped before {what}")
            return waiting.result()
        finally:
            waiting.cancel()
            running.cancel()  # it takes no new job; the ones it started run to their end
            await asyncio.gather(running, *worker.tasks.values(), return_exceptions=True)
            await worker.close()

    async def _drain(self) -> None:
        worker = build_worker(self.stack.settings, redis_url=self.stack.redis.url, burst=True, handle_signals=False)
        try:
            await asyncio.wait_for(worker.async_run(), DRAIN_TIMEOUT)
        finally:
            await worker.close()
        assert not worker.jobs_failed, f"{worker.jobs_failed} job(s) failed; the worker's log says which"
