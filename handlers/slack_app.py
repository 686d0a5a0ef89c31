"""The slack-bolt app, assembled from one listener module per surface.

It runs with process_before_response=True: Slack gets its 200 when a listener returns, so a
request's durable part (a lease claim, a state change, a queued job) is done before Slack
stops retrying it, and a crash in between makes Slack retry instead of losing it. Listeners
keep that part short and hand Slack-facing follow-ups (response_url replies, views.publish)
to bolt's lazy listeners, which run after the ack. It is also the cheaper mode: bolt does not
start a task per request and poll it every 10 ms for the ack.
"""

from __future__ import annotations

import asyncio
import importlib
import logging

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.web.async_client import AsyncWebClient

from agent.context import Services

log = logging.getLogger(__name__)

# Each module exposes register(app, svc); adding a surface is one line here.
LISTENER_MODULES: tuple[str, ...] = (
    "handlers.slash",
    "handlers.alerts",
    "handlers.mentions",
    "handlers.proposal_buttons",
    "handlers.app_home",
    "handlers.membership",
    "handlers.feedback_buttons",
)


class SingleFlightAuthorize:
    """auth.test once per process, shared by every request.

    bolt's default single-team authorization calls auth.test lazily from each request until
    the first answer arrives, so a cold burst of N requests makes N auth.test calls (rate
    limited, and each holds its ack). One lock, one call, one cached result — and `warm()` lets
    the web process make that call at start-up, so no request waits on Slack before its ack.
    """

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client
        self._lock = asyncio.Lock()
        self._cached: AuthorizeResult | None = None

        # bolt passes an authorize function the context values its parameters name, so it gets a
        # plain function (a bound method's `self` would be one of them).
        async def for_bolt(**_: object) -> AuthorizeResult:
            return await self.result()

        self.for_bolt = for_bolt

    async def result(self) -> AuthorizeResult:
        if self._cached is None:
            async with self._lock:
                if self._cached is None:
                    response = await self._client.auth_test()
                    self._cached = AuthorizeResult.from_auth_test_response(
                        auth_test_response=response, bot_token=self._client.token, user_token=None)
        return self._cached

    async def warm(self, timeout: float) -> bool:
        """Authorize now; False (the first request then does it) when Slack does not answer in time."""
        try:
            await asyncio.wait_for(self.result(), timeout)
            return True
        except Exception as error:  # start-up goes on: a later request retries auth.test
            log.warning("auth.test at start-up failed (%s: %s); the first request will retry it",
                        type(error).__name__, error)
            return False


def build_bolt_app(svc: Services, *, client: AsyncWebClient, signing_secret: str,
                   authorize: SingleFlightAuthorize | None = None) -> AsyncApp:
    app = AsyncApp(client=client, signing_secret=signing_secret, process_before_response=True,
                   authorize=(authorize or SingleFlightAuthorize(client)).for_bolt)
    for module_name in LISTENER_MODULES:
        importlib.import_module(module_name).register(app, svc)
    app.error(report_listener_error)
    return app


async def report_listener_error(error: Exception, body: dict) -> None:
    """bolt answers a listener that raised with a 500 (Slack retries it). A state store that is
    away is an outage, said in this one line for every listener, not a bug to trace; the line names
    the request (never its text), so the message it concerns can be found."""
    if isinstance(error, RedisError):
        log.warning("listener left the request for Slack to retry (%s): state store unavailable (%s: %s)",
                    request_named(body), type(error).__name__, error)
        return
    log.error("listener failed (%s)", request_named(body), exc_info=error)


def request_named(body: dict) -> str:
    """Which request: an event's type, channel and ts; a command and its channel; a button and its
    channel. Each part is cut short: a hostile body's fields can be anything."""
    if isinstance(event := body.get("event"), dict):
        return f"{_part(event.get('type'))} in {_part(event.get('channel'))} at {_part(event.get('ts'))}"
    if "command" in body:
        return f"{_part(body.get('command'))} in {_part(body.get('channel_id'))}"
    actions, channel = body.get("actions"), body.get("channel")
    if isinstance(actions, list) and actions and isinstance(actions[0], dict):
        where = channel.get("id") if isinstance(channel, dict) else None
        return f"{_part(actions[0].get('action_id'))} in {_part(where)}"
    return _part(body.get("type") or "a request")


def _part(value: object) -> str:
    return "?" if value is None else str(value)[:60]
