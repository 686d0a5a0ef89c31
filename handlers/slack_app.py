"""The slack-bolt app, assembled from one listener module per surface."""

from __future__ import annotations

import importlib

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from agent.context import Services

# Each module exposes register(app, services); adding a surface is one line here.
LISTENER_MODULES: tuple[str, ...] = (
    "handlers.slash",
    "handlers.teardown_buttons",
    "handlers.mentions",
)


def build_bolt_app(services: Services, *, client: AsyncWebClient, signing_secret: str) -> AsyncApp:
    app = AsyncApp(client=client, signing_secret=signing_secret, process_before_response=False)
    for module_name in LISTENER_MODULES:
        importlib.import_module(module_name).register(app, services)
    return app
