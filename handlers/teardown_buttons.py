"""The teardown confirm card's buttons. The clicker is re-checked: anyone can click."""

from __future__ import annotations

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext

from agent.lease import lifecycle
from agent.context import Services
from handlers import cards
from handlers.clicks import clicked_value, clicker, on_click, reply_after_ack


def register(app: AsyncApp, svc: Services) -> None:
    async def handle_teardown_confirm(ack: AsyncAck, body: dict, context: AsyncBoltContext) -> None:
        outcome = await lifecycle.confirm_teardown(svc, clicker(body), clicked_value(body))
        if outcome.ok and outcome.lease is not None:
            reply_after_ack(context, replace_original=True,
                            text=f":wastebasket: Tearing down `{outcome.lease.qr_id}`… the status card shows progress.")
        else:
            reply_after_ack(context, text=f":no_entry: {outcome.message}", replace_original=False,
                            response_type="ephemeral")
        await ack()

    async def handle_teardown_cancel(ack: AsyncAck, context: AsyncBoltContext) -> None:
        reply_after_ack(context, text="Kept the TPU; nothing changed.", replace_original=True)
        await ack()

    on_click(app, cards.TEARDOWN_CONFIRM_ACTION, handle_teardown_confirm)
    on_click(app, cards.TEARDOWN_CANCEL_ACTION, handle_teardown_cancel)
