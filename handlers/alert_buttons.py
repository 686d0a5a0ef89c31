"""The alert buttons: "Tear down now" (into the usual confirm flow) and "Acknowledge".

Anyone can click a button in a channel, so the clicker is checked here, and a button from an
old alert never acts on the channel's newer lease: the lease id in the button must match.
"""

from __future__ import annotations

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from agent import oncall
from agent.actions import run_action
from agent.context import Services
from handlers import cards
from handlers.alerts import ALERT_ACK_ACTION, ALERT_TEARDOWN_ACTION, parse_button_value
from handlers.slash import STATE_STORE_DOWN
from handlers.clicks import clicker

GONE = "That alert's TPU is already gone; nothing changed."


def register(app: AsyncApp, services: Services) -> None:
    @app.action(ALERT_TEARDOWN_ACTION)
    async def handle_alert_teardown(ack: AsyncAck, body: dict, respond: AsyncRespond) -> None:
        await ack()
        actor = clicker(body)
        lease_id, _kind = parse_button_value(body["actions"][0].get("value", ""))
        try:
            lease = await services.leases.get(actor.team, actor.channel)
            if lease is None or lease.lease_id != lease_id:
                await respond(text=GONE, replace_original=False, response_type="ephemeral")
                return
            result = await run_action("teardown", services, actor, {})
        except RedisError:
            await respond(text=STATE_STORE_DOWN, replace_original=False, response_type="ephemeral")
            return
        if result.needs_confirmation and result.lease is not None:
            text, blocks = cards.teardown_confirm_card(result.lease)
            await respond(text=text, blocks=blocks, replace_original=False, response_type="ephemeral")
        else:
            await respond(text=f":no_entry: {result.text}", replace_original=False, response_type="ephemeral")

    @app.action(ALERT_ACK_ACTION)
    async def handle_alert_ack(ack: AsyncAck, body: dict, respond: AsyncRespond) -> None:
        await ack()
        actor = clicker(body)
        lease_id, kind = parse_button_value(body["actions"][0].get("value", ""))
        try:
            outcome = await oncall.acknowledge(services, actor, lease_id, kind)
        except RedisError:
            await respond(text=STATE_STORE_DOWN, replace_original=False, response_type="ephemeral")
            return
        visible = outcome.ok and outcome.changed
        await respond(text=f":white_check_mark: {outcome.text}" if visible else outcome.text,
                      replace_original=False, response_type="in_channel" if visible else "ephemeral")
