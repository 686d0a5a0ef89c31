"""@-mentions. The agent issue replaces this placeholder with the real mention pipeline."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from agent.context import Services


def register(app: AsyncApp, services: Services) -> None:
    @app.event("app_mention")
    async def handle_mention(event: dict, say) -> None:
        await say(text="I can't read logs yet. Try `/tpu help`.", thread_ts=event.get("thread_ts") or event["ts"])
