"""The in-process tier's bot (README "Tests"): our web side and our worker in the test's own thread,
with the emulated Slack, cloud and model they talk to, and no web server or thread of ours.

A signed request (`signed_requests()`, the same client the end-to-end tests use) goes to the bolt
app the web process builds (`handlers.slack_app.build_bolt_app`, on `build_services`, both made
once, as `bot/web.py` makes them), dispatched in this process rather than posted to `/slack/events`:
bolt checks the signature, runs the middleware and routes it to our listener, and its ack is the
reply, returned once what the listener started after the ack (a lazy listener, a late answer) has
ended. The worker is the one the Procfile runs (`bot.worker.build_worker`), started at the first
wait and kept for the bot's life. Everything shares one event loop, which runs only while the test
waits through the bot, so a test reads the bot's state while it stands still, and the worker makes
progress exactly when the test waits:
- `until(predicate)` is tests/waiting.py's `wait_until`, with the loop running between polls;
- `mention()` sends an `app_mention` and runs the loop until no job is due or running: the answer is
  in the Slack stand-in when `mention()` returns (deferred jobs, a lease's timers, wait their time).

What this leaves out is our web server (bot/web.py: the request gate before bolt, the HTTP status
of what it refuses) and processes that run side by side; the end-to-end files keep those
(test_agent_mentions, test_hostile_input, test_slack_conformance, test_slack_lifecycle)."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from arq.connections import ArqRedis
from redis.asyncio import Redis
from slack_bolt.async_app import AsyncApp, AsyncBoltRequest

from agent.context import Services
from bot.arq_worker_adapter import OutageTolerantWorker
from bot.local_stack import LocalStack
from bot.worker import build_worker
from bot.wiring import build_services, slack_client_from
from handlers.slack_app import build_bolt_app
from infra.jobs import QUEUE_NAME
from infra.sandbox.slack_api import SlackApiSandbox
from infra.sandbox.slack_requests import SlackReply, SlackRequests
from waiting import wait_until

T = TypeVar("T")

# How long what a listener started after its ack, and a mention's jobs, may take.
AFTER_ACK_TIMEOUT = 30.0
IDLE_TIMEOUT = 60.0
# Set while a request is dispatched: a task created then (bolt's lazy listeners, a late answer) is
# the request's, and inherits it; the worker's tasks are created from the worker's own task.
_DISPATCHING: contextvars.ContextVar[bool] = contextvars.ContextVar("dispatching", default=False)


@dataclass
class _WebSide:
    services: Services
    redis: Redis
    pool: ArqRedis
    bolt: AsyncApp


@dataclass
class InProcessBot:
    stack: LocalStack  # the emulators and the settings pointed at them; no web app, no worker thread
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _web: _WebSide | None = None
    _worker: OutageTolerantWorker | None = None
    _worker_run: asyncio.Future | None = None
    _after_ack: set[asyncio.Task] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.loop.set_task_factory(self._task_of)

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
                             transport=lambda body, headers: self._run(self._dispatch(body, headers)))

    def mention(self, text: str, *, user: str, channel: str, **kwargs: Any) -> SlackReply:
        """An `app_mention` (SlackRequests.mention's arguments), then the worker until it is idle."""
        requests = self.signed_requests()
        try:
            reply = requests.mention(text, user=user, channel=channel, **kwargs)
        finally:
            requests.close()
        self.until(lambda: self._run(self._idle()), timeout=IDLE_TIMEOUT, what="no job due or running")
        return reply

    def until(self, predicate: Callable[[], T], timeout: float = 60.0, interval: float = 0.05,
              what: str = "condition") -> T:
        """Poll `predicate` until it is truthy, and return it; the worker runs between polls."""
        return wait_until(predicate, timeout, interval, what, pause=lambda seconds: self._run(self._work(seconds)))

    def close(self) -> None:
        self._run(self._close())
        self.loop.close()

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(work)

    def _task_of(self, loop: asyncio.AbstractEventLoop, coro: Coroutine, **kwargs: Any) -> asyncio.Task:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        if _DISPATCHING.get():
            self._after_ack.add(task)
            task.add_done_callback(self._after_ack.discard)
        return task

    async def _web_side(self) -> _WebSide:
        if self._web is None:
            settings = self.stack.settings
            services, redis, pool = await build_services(settings, redis_url=self.stack.redis.url,
                                                         slack_client=slack_client_from(settings))
            bolt = build_bolt_app(services, client=slack_client_from(settings),
                                  signing_secret=settings.slack_signing_secret.get_secret_value())
            self._web = _WebSide(services, redis, pool, bolt)
        return self._web

    async def _dispatch(self, body: str, headers: dict[str, str]) -> SlackReply:
        web = await self._web_side()
        token = _DISPATCHING.set(True)
        try:
            response = await web.bolt.async_dispatch(AsyncBoltRequest(body=body, headers=headers))
        finally:
            _DISPATCHING.reset(token)
        if self._after_ack:
            _, running = await asyncio.wait(set(self._after_ack), timeout=AFTER_ACK_TIMEOUT)
            assert not running, f"work after the ack still running after {AFTER_ACK_TIMEOUT} s: {running}"
        return SlackReply(response.status, response.body)

    async def _work(self, seconds: float) -> None:
        """Run the worker (started at the first call) for `seconds`."""
        if self._worker is None:
            self._worker = build_worker(self.stack.settings, redis_url=self.stack.redis.url, handle_signals=False)
            self._worker_run = asyncio.ensure_future(self._worker.async_run())
        assert self._worker_run is not None
        await asyncio.wait({self._worker_run}, timeout=seconds)
        if self._worker_run.done():
            self._worker_run.result()  # the worker's own error, if it raised one
            raise AssertionError("the worker stopped")

    async def _idle(self) -> bool:
        """No job due (arq keeps a running job in the queue until it ends) and none running."""
        if self._worker is None:  # not started: the queue is not looked at yet
            return False
        due = await self._worker.pool.zcount(QUEUE_NAME, 0, int(time.time() * 1000))
        return not due and all(task.done() for task in self._worker.tasks.values())

    async def _close(self) -> None:
        if self._worker is not None and self._worker_run is not None:
            # It takes no new job; the ones it started run to their end. `stopping` first: a
            # cancellation that a Redis call's own timeout swallows would leave the poll loop
            # running (bot/arq_worker_adapter.py), as it would for handle_sig without it.
            self._worker.stopping = True
            self._worker_run.cancel()
            await asyncio.gather(self._worker_run, *self._worker.tasks.values(), return_exceptions=True)
            await self._worker.close()
        if self._web is not None:
            await self._web.pool.aclose()
            await self._web.redis.aclose()
