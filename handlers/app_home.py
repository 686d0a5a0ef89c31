"""The App Home tab: on `app_home_opened` (tab `home`), publish the workspace's leases and the
zone scoreboard to the user who opened it.

Both lists come from actions (`leases`, `zones`), so the access rules for read actions apply to
the Home tab as to `/tpu status` (the Home tab is no channel: a deployment that limits reads to
some channels shows the refusal here). Opening the Messages tab also sends `app_home_opened`
(tab `messages`); it is ignored.
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.actions import run_action, spend_actions, workspace_actions, zone_actions
from agent.context import Actor, Services
from handlers import cards
from handlers.home_view import home_view

log = logging.getLogger(__name__)



def register(app: AsyncApp, svc: Services) -> None:
    async def ack_home_opened() -> None:
        return None  # nothing to keep: the tab is redrawn from state on the next open

    async def publish_home(body: dict, event: dict, client: AsyncWebClient) -> None:
        if event.get("tab", "home") != "home" or not event.get("user"):
            return
        actor = Actor(user_id=event["user"], team=body.get("team_id") or event.get("team", ""), channel="")
        try:
            view = await build_home(svc, actor)
        except RedisError:
            log.exception("state store unavailable; Home tab not refreshed for %s", actor.user_id)
            view = {"type": "home", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text":
                    ":warning: The state store is unavailable. Reopen this tab in a minute."}}]}
        try:
            await client.views_publish(user_id=actor.user_id, view=view)
        except SlackApiError as error:
            log.warning("views.publish for %s failed: %s", actor.user_id, error.response.get("error"))

    # Reading the leases and publishing the view take a few calls; none of it should hold the ack.
    app.event("app_home_opened")(ack=ack_home_opened, lazy=[publish_home])


async def build_home(svc: Services, actor: Actor) -> dict:
    listed = await run_action(workspace_actions.leases, svc, actor, {})
    result = await run_action(zone_actions.zones, svc, actor, {})
    if isinstance(result.payload, zone_actions.ZoneBoard):
        zones = cards.zones_card(result.payload.zones, result.payload.order)
    else:
        zones = (result.text, [{"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"Zone scoreboard: {cards.escape(result.text)}"}]}])
    spend = await run_action(spend_actions.spend, svc, actor, {})  # the month's spend per channel (issue 21)
    return home_view(listed, zones, spend=spend)
