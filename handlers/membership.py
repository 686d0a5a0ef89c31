"""The bot joining or leaving a channel: `member_joined_channel` / `member_left_channel` for the
bot's own user (bolt passes these through its self-event filter), kept in Redis so `/tpu up`
in a channel the bot was removed from answers with the fix before claiming anything."""

from __future__ import annotations

import logging

from slack_bolt.async_app import AsyncApp, AsyncBoltContext

from agent.context import ThreadDeps
from handlers.late_answers import LateAnswers, within_ack_budget

log = logging.getLogger(__name__)


def register(app: AsyncApp, svc: ThreadDeps) -> None:
    # The write holds the ack: past Slack's budget the event gets a 500 and Slack sends it again
    # (recording membership twice is harmless), never an ack Slack has already given up on.
    recording: LateAnswers[bool] = LateAnswers()

    async def recorded_late(_: bool) -> None:
        log.info("channel membership recorded after its ack budget; Slack's retry records it again")

    async def record(body: dict, event: dict, bot_user_id: str, *, member: bool) -> None:
        await within_ack_budget(recording, record_bot_membership(svc, body, event, bot_user_id, member=member),
                                recorded_late, not_done="channel membership was not recorded")

    @app.event("member_joined_channel")
    async def bot_joined(body: dict, event: dict, context: AsyncBoltContext) -> None:
        await record(body, event, context.bot_user_id or "", member=True)

    @app.event("member_left_channel")
    async def bot_left(body: dict, event: dict, context: AsyncBoltContext) -> None:
        await record(body, event, context.bot_user_id or "", member=False)


async def record_bot_membership(svc: ThreadDeps, body: dict, event: dict, bot_user_id: str, *, member: bool) -> bool:
    if not event.get("channel") or event.get("user") != bot_user_id:
        return False  # a person joining or leaving changes nothing for the bot
    team = body.get("team_id") or event.get("team", "")
    await svc.membership.record(team, event["channel"], member=member)
    return True
