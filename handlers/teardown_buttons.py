"""The teardown confirm card's buttons. The clicker is re-checked: anyone can click."""

from __future__ import annotations

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from agent import lifecycle
from agent.context import Services
from handlers import cards
from handlers.clicks import clicked_value, clicker
from handlers.slash import STATE_STORE_DOWN


def register(app: AsyncApp, services: Services) -> None:
    @app.action(cards.TEARDOWN_CONFIRM_ACTION)
    async def handle_teardown_confirm(ack: AsyncAck, body: dict, respond: AsyncRespond) -> None:
        await ack()
        actor = clicker(body)
        lease_id = clicked_value(body)
        try:
            outcome = await lifecycle.confirm_teardown(services, actor, lease_id)
        except RedisError:
            await respond(text=STATE_STORE_DOWN, replace_original=False, response_type="ephemeral")
            return
        if outcome.ok:
            await respond(text=f":wastebasket: Tearing down `{outcome.lease.qr_id}`… the status card shows progress.",
                          replace_original=True)
        else:
            await respond(text=f":no_entry: {outcome.message}", replace_original=False, response_type="ephemeral")

    @app.action(cards.TEARDOWN_CANCEL_ACTION)
    async def handle_teardown_cancel(ack: AsyncAck, respond: AsyncRespond) -> None:
        await ack()
        await respond(text="Kept the TPU; nothing changed.", replace_original=True)
