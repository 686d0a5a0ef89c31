"""The bot joining or leaving a channel: `member_joined_channel` / `member_left_channel` for the
bot's own user (bolt passes these through its self-event filter), kept in Redis so `/tpu up`
in a channel the bot was removed from answers with the fix before claiming anything."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp, AsyncBoltContext

from agent.context import Services


def register(app: AsyncApp, services: Services) -> None:
    @app.event("member_joined_channel")
    async def bot_joined(body: dict, event: dict, context: AsyncBoltContext) -> None:
        await record_bot_membership(services, body, event, context.bot_user_id or "", member=True)

    @app.event("member_left_channel")
    async def bot_left(body: dict, event: dict, context: AsyncBoltContext) -> None:
        await record_bot_membership(services, body, event, context.bot_user_id or "", member=False)


async def record_bot_membership(services: Services, body: dict, event: dict, bot_user_id: str, *, member: bool) -> None:
    if services.membership is None or not event.get("channel") or event.get("user") != bot_user_id:
        return  # a person joining or leaving changes nothing for the bot
    team = body.get("team_id") or event.get("team", "")
    await services.membership.record(team, event["channel"], member=member)
