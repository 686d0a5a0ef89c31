"""The slack-bolt app, assembled from one listener module per surface."""

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
    app = AsyncApp(client=client, signing_secret=signing_secret, process_before_response=False,
                   authorize=single_flight_authorize(client))
    for module_name in LISTENER_MODULES:
        importlib.import_module(module_name).register(app, services)
    return app
