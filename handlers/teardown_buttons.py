"""The teardown confirm card's buttons. The clicker is re-checked: anyone can click."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from agent.lease import lifecycle
from agent.context import Services
from handlers import cards
from handlers.clicks import clicked_value, clicker, on_click


def register(app: AsyncApp, svc: Services) -> None:
    async def handle_teardown_confirm(body: dict) -> dict:
        outcome = await lifecycle.confirm_teardown(svc, clicker(body), clicked_value(body))
        if outcome.ok and outcome.lease is not None:
            return dict(replace_original=True,
                        text=f":wastebasket: Tearing down `{outcome.lease.qr_id}`… the status card shows progress.")
        return dict(text=f":no_entry: {outcome.message}", replace_original=False, response_type="ephemeral")

    async def handle_teardown_cancel(body: dict) -> dict:
        return dict(text="Kept the TPU; nothing changed.", replace_original=True)

    on_click(app, cards.TEARDOWN_CONFIRM_ACTION, handle_teardown_confirm)
    on_click(app, cards.TEARDOWN_CANCEL_ACTION, handle_teardown_cancel)
