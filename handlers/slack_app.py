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

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.web.async_client import AsyncWebClient

from agent.context import Services

# Each module exposes register(app, services); adding a surface is one line here.
LISTENER_MODULES: tuple[str, ...] = (
    "handlers.slash",
    "handlers.teardown_buttons",
    "handlers.alert_buttons",
    "handlers.mentions",
    "handlers.proposal_buttons",
    "handlers.app_home",
    "handlers.membership",
)


def single_flight_authorize(client: AsyncWebClient):
    """auth.test once per process, shared by every request.

    bolt's default single-team authorization calls auth.test lazily from each request until
    the first answer arrives, so a cold burst of N requests makes N auth.test calls (rate
    limited, and each holds its ack). One lock, one call, one cached result.
    """
    lock = asyncio.Lock()
    cached: list[AuthorizeResult] = []

    async def authorize(**_: object) -> AuthorizeResult:
        if not cached:
            async with lock:
                if not cached:
                    response = await client.auth_test()
                    cached.append(AuthorizeResult.from_auth_test_response(
                        auth_test_response=response, bot_token=client.token, user_token=None))
        return cached[0]

    return authorize


def build_bolt_app(services: Services, *, client: AsyncWebClient, signing_secret: str) -> AsyncApp:
    app = AsyncApp(client=client, signing_secret=signing_secret, process_before_response=True,
                   authorize=single_flight_authorize(client))
    for module_name in LISTENER_MODULES:
        importlib.import_module(module_name).register(app, services)
    return app
