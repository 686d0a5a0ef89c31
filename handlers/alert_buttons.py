"""The alert buttons: "Tear down now" (into the usual confirm flow) and "Acknowledge".

Anyone can click a button in a channel, so the clicker is checked here, and a button from an
old alert never acts on the channel's newer lease: the lease id in the button must match.
"""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from agent.lease import oncall
from agent.actions import lease_actions, run_action
from agent.context import Services
from handlers import cards
from handlers.alerts import ALERT_ACK_ACTION, ALERT_TEARDOWN_ACTION, parse_button_value
from handlers.clicks import clicker, on_click

GONE = "That alert's TPU is already gone; nothing changed."


def register(app: AsyncApp, svc: Services) -> None:
    async def handle_alert_teardown(body: dict) -> dict:
        return await teardown_from_alert(svc, body)

    async def handle_alert_ack(body: dict) -> dict:
        actor = clicker(body)
        lease_id, kind = parse_button_value(body["actions"][0].get("value", ""))
        outcome = await oncall.acknowledge(svc, actor, lease_id, kind)
        visible = outcome.ok and outcome.changed
        return dict(text=f":white_check_mark: {outcome.text}" if visible else outcome.text,
                    replace_original=False, response_type="in_channel" if visible else "ephemeral")

    on_click(app, ALERT_TEARDOWN_ACTION, handle_alert_teardown)
    on_click(app, ALERT_ACK_ACTION, handle_alert_ack)


async def teardown_from_alert(svc: Services, body: dict) -> dict:
    """The reply to "Tear down now": the usual confirm card, if the alert's lease is still the channel's."""
    actor = clicker(body)
    lease_id, _kind = parse_button_value(body["actions"][0].get("value", ""))
    lease = await svc.leases.get(actor.team, actor.channel)
    if lease is None or lease.lease_id != lease_id:
        return dict(text=GONE, replace_original=False, response_type="ephemeral")
    result = await run_action(lease_actions.teardown, svc, actor, {})
    if isinstance(result.payload, lease_actions.TeardownOf) and result.payload.lease:
        text, blocks = cards.teardown_confirm_card(result.payload.lease)
        return dict(text=text, blocks=blocks, replace_original=False, response_type="ephemeral")
    return dict(text=f":no_entry: {result.text}", replace_original=False, response_type="ephemeral")
