"""`tpubot socket`: the bolt app over Slack's Socket Mode, stopped without dropping what it received.

A deploy stops the process with SIGTERM (Ctrl-C sends SIGINT). An envelope it never acknowledged
Slack counts as not delivered (it retries an event; a command or a click shows the user it failed),
so what the process has not started is safe to leave. What it has started is not: a click's reply
goes out after the ack (bolt's lazy listener), and a late answer after its work. So a stop takes no
new envelope, lets the started ones finish and send their acks while the connection is open, closes
it, and waits for what they left running before the pools close.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest

from bot.settings import Settings
from bot.wiring import WEB_REDIS_TIMEOUT_SECONDS, build_services, slack_client_from, slack_http_session
from handlers.late_answers import DRAIN_SECONDS, finish_acked_work
from handlers.slack_app import build_bolt_app

log = logging.getLogger(__name__)


APP_TOKEN_FIX = ("generate one (xapp-…) with the connections:write scope under Basic Information → App-Level "
                 "Tokens and set SLACK_APP_TOKEN to it.")
BOT_TOKEN_FIX = "set SLACK_BOT_TOKEN to the Bot User OAuth Token (xoxb-…) from OAuth & Permissions."


class SocketModeRefused(Exception):
    """Slack refused a token: the one line that says which and the fix."""


def app_token_problem(app_token: str) -> str:
    """What is wrong with SLACK_APP_TOKEN before asking Slack ('' when nothing is)."""
    if app_token.startswith("xapp-"):
        return ""
    return (f"SLACK_APP_TOKEN starts with {app_token.split('-', 1)[0]!r}, but Socket Mode needs an app-level "
            f"token: {APP_TOKEN_FIX}")


async def socket_tokens_refused(client, app_token: str) -> str:
    """One line naming the token Slack refuses and the fix; '' when both are accepted.

    slack_sdk's Socket Mode client retries `apps.connections.open` forever whatever the error,
    so a wrong token would otherwise mean a traceback every few seconds and no exit."""
    for name, call, fix in (("SLACK_APP_TOKEN", lambda: client.apps_connections_open(app_token=app_token), APP_TOKEN_FIX),
                            ("SLACK_BOT_TOKEN", client.auth_test, BOT_TOKEN_FIX)):
        try:
            await call()
        except SlackApiError as error:
            reason = error.response.get("error") if isinstance(error.response.data, dict) else error.response.status_code
            return f"Slack refused {name} ({reason}): {fix}"
    return ""


async def run_socket_mode(settings: Settings, *, redis_url: str) -> None:
    """Connect, answer envelopes until SIGTERM or SIGINT, then stop as the module says."""
    app_token = settings.slack_app_token.get_secret_value()
    async with slack_http_session() as session:
        client = slack_client_from(settings, session=session)
        refused = await socket_tokens_refused(client, app_token)
        if refused:
            raise SocketModeRefused(refused)
        # As the web process: acks do not wait on Redis past their budget (handlers/late_answers.py),
        # so a command caught in a failover pause may finish whole.
        svc, redis, pool = await build_services(settings, redis_url=redis_url, slack_client=client,
                                                redis_timeout=WEB_REDIS_TIMEOUT_SECONDS)
        try:
            # bolt's client stays sessionless: bolt deep-copies it for lazy listeners (bot/web.py).
            bolt = build_bolt_app(svc, client=slack_client_from(settings),
                                  signing_secret=settings.slack_signing_secret.get_secret_value())
            handler = _StoppableHandler(bolt, app_token)
            before_connecting = asyncio.all_tasks()
            stop = _stop_on_signals()
            await handler.connect_async()
            log.info("connected to Slack over Socket Mode")
            await stop.wait()
            await _stop(handler, started_since=before_connecting)
        finally:
            await pool.aclose()
            await redis.aclose()


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


class _StoppableHandler(AsyncSocketModeHandler):
    """bolt's handler, knowing which envelopes it is handling (slack_sdk runs each in a task of its
    own, and keeps none), so a stop can let them finish. Typed as bolt types its own `handle`."""

    def __init__(self, app: AsyncApp, app_token: str) -> None:
        super().__init__(app, app_token)
        self.handling: set[asyncio.Task] = set()

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        task = asyncio.current_task()
        assert task is not None
        self.handling.add(task)
        try:
            await super().handle(client, req)
        finally:
            self.handling.discard(task)


async def _stop(handler: _StoppableHandler, *, started_since: set[asyncio.Task]) -> None:
    log.info("stopping: taking no new envelope; finishing the %d being handled", len(handler.handling))
    # slack_sdk reads envelopes off its queue in this task; without it, what arrives stays unacked.
    handler.client.message_processor.cancel()
    if handler.handling:
        await asyncio.wait(set(handler.handling), timeout=DRAIN_SECONDS)
    await handler.close_async()  # no reconnect from here
    await finish_acked_work(started_since)
