"""The in-process tier's bot (README "Tests"): our web app and our worker in the test's own thread,
with the emulated Slack, cloud and model they talk to, and no web server or thread of ours.

The web side is the app `tpubot serve` runs (`bot.web.create_web_app`, its lifespan entered at the
first request, as uvicorn enters it), reached over httpx's ASGI transport rather than a socket: a
signed request (`signed_requests()`, the same client the end-to-end tests use) passes the request
gate, bolt checks the signature, runs the middleware and routes it to our listener, and the app's
answer is the reply. An alert sender's, a probe's or a scraper's request goes the same way through
`http()`. The reply comes back once what the request started after its answer (a lazy listener, a
late answer) has ended. The worker is the one the Procfile runs (`bot.worker.build_worker`), started
at the first wait and kept for the bot's life. Everything shares one event loop, which runs only
while the test waits through the bot, so a test reads the bot's state while it stands still, and the
worker makes progress exactly when the test waits:
- `until(predicate)` is tests/waiting.py's `wait_until`, with the loop running between polls;
- `mention()` sends an `app_mention` and runs the loop until no job is due or running: the answer is
  in the Slack stand-in when `mention()` returns (deferred jobs, a lease's timers, wait their time).

What this leaves out is the socket (uvicorn: a body that stops arriving, a sender that goes away)
and work that runs side by side (requests at once, a Slack that holds a call, processes killed); the
end-to-end files keep those (test_alert_senders, test_alert_stall, test_faults, test_hostile_input,
test_slack_conformance, test_slack_lifecycle)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from starlette.applications import Starlette

from bot.arq_worker_adapter import OutageTolerantWorker
from bot.local_stack import LocalStack
from bot.web import create_web_app
from bot.worker import build_worker
from infra.jobs import QUEUE_NAME
from infra.sandbox.slack_api import SlackApiSandbox
from infra.sandbox.slack_requests import SlackReply, SlackRequests
from waiting import wait_until

T = TypeVar("T")

# Where the web app answers; no socket is behind it, only the ASGI transport.
WEB_URL = "http://tpubot.in-process"
# How long what a request started after its answer, and a mention's jobs, may take.
AFTER_ANSWER_TIMEOUT = 30.0
IDLE_TIMEOUT = 60.0
# Set while the app answers a request: a task created then (bolt's lazy listeners, a late answer) is
# the request's, and inherits it; the worker's tasks are created from the worker's own task.
_ANSWERING: contextvars.ContextVar[bool] = contextvars.ContextVar("answering", default=False)


class _LoopTransport(httpx.BaseTransport):
    """A synchronous httpx transport that answers on the bot's loop."""

    def __init__(self, send: Callable[[httpx.Request], httpx.Response]) -> None:
        self._send = send

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._send(request)


@dataclass
class InProcessBot:
    stack: LocalStack  # the emulators and the settings pointed at them; no web server, no worker thread
    runs_worker: bool = True  # False: the web app alone, so any write to Redis is a request's
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _app: Starlette | None = None
    _app_lifespan: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    _worker: OutageTolerantWorker | None = None
    _worker_run: asyncio.Future | None = None
    _after_answer: set[asyncio.Task] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.loop.set_task_factory(self._task_of)

    def __getattr__(self, name: str) -> Any:
        # What a test reads from a LocalStack (its emulators, settings, Redis) reads the same here.
        return getattr(self.stack, name)

    @property
    def slack(self) -> SlackApiSandbox:
        assert self.stack.slack is not None, "the in-process bot records replies in its Slack stand-in"
        return self.stack.slack

    def http(self, timeout: float = 30.0) -> httpx.Client:
        """An HTTP client for the web app (alert webhooks, /healthz, /readyz, /metrics)."""
        return httpx.Client(base_url=WEB_URL, timeout=timeout, transport=_LoopTransport(self._answer))

    def signed_requests(self, team: str = "T0SANDBOX") -> SlackRequests:
        """Signed Slack requests to the web app's /slack/events, as to a LocalStack's."""
        return SlackRequests(f"{WEB_URL}/slack/events", self.stack.signing_secret, team=team,
                             response_url_factory=self.slack.response_url, http=self.http())

    def mention(self, text: str, *, user: str, channel: str, **kwargs: Any) -> SlackReply:
        """An `app_mention` (SlackRequests.mention's arguments), then the worker until it is idle."""
        requests = self.signed_requests()
        try:
            reply = requests.mention(text, user=user, channel=channel, **kwargs)
        finally:
            requests.close()
        self.settle()
        return reply

    def settle(self) -> None:
        """Run the worker until no job is due or running (deferred ones, a lease's timers, wait their time)."""
        self.until(lambda: self._run(self._idle()), timeout=IDLE_TIMEOUT, what="no job due or running")

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
        if _ANSWERING.get():
            self._after_answer.add(task)
            task.add_done_callback(self._after_answer.discard)
        return task

    def _answer(self, request: httpx.Request) -> httpx.Response:
        return self._run(self._answer_async(request))

    async def _answer_async(self, request: httpx.Request) -> httpx.Response:
        if self._app is None:  # its lifespan is entered once, as uvicorn enters it at start-up
            app = create_web_app(self.stack.settings, redis_url=self.stack.redis.url)
            await self._app_lifespan.enter_async_context(app.router.lifespan_context(app))
            self._app = app
        token = _ANSWERING.set(True)
        try:
            response = await httpx.ASGITransport(app=self._app).handle_async_request(request)
            content = await response.aread()
        finally:
            _ANSWERING.reset(token)
        if self._after_answer:
            _, running = await asyncio.wait(set(self._after_answer), timeout=AFTER_ANSWER_TIMEOUT)
            assert not running, f"work after the answer still running after {AFTER_ANSWER_TIMEOUT} s: {running}"
        return httpx.Response(response.status_code, headers=response.headers, content=content, request=request)

    async def _work(self, seconds: float) -> None:
        """Run the worker (started at the first call) for `seconds`."""
        if not self.runs_worker:
            await asyncio.sleep(seconds)  # what the web app left running goes on
            return
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
        await self._app_lifespan.aclose()  # the app's shutdown: late answers drained, its pools closed
