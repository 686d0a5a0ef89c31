"""What every button click carries — who clicked (re-checked by the actions, since anyone in
the channel can click) and the button's opaque value — and how a click is answered."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext, AsyncRespond

from agent.context import Actor
from handlers.late_answers import LATE_FAILURE, LateAnswers, state_store_notice

MAX_VALUE = 64  # our values are ids; anything longer is not one of ours


def clicker(body: dict) -> Actor:
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id", "")
    team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id", "")
    return Actor(user_id=body["user"]["id"], team=team, channel=channel)


def clicked_value(body: dict) -> str:
    return str(body["actions"][0].get("value", ""))[:MAX_VALUE]


# --- answering a click ----------------------------------------------------------------------
# The app runs with process_before_response=True (handlers/slack_app.py): a click's state
# change and job enqueue finish before Slack gets its 200. The message back to the clicker
# goes to the click's response_url, a separate HTTP call that must not hold the ack, so the
# ack function leaves it in the context and bolt's lazy listener `send_reply` sends it.
REPLY = "tpubot_reply"


async def send_reply(respond: AsyncRespond, context: AsyncBoltContext) -> None:
    message = context.get(REPLY)
    if message:
        await respond(**message)


def on_click(app: AsyncApp, action_id: str, handle: Callable[[dict], Awaitable[dict]]) -> None:
    """Register `handle` (the click's body → its reply, respond()'s kwargs), acked after its
    durable work, with `send_reply` as its lazy listener.

    A handler that the state store fails (RedisError) is answered with the state-store notice.
    A click whose work overruns the ack budget (the state store in a failover pause) is acked
    empty while the work goes on; its reply is then posted when the work ends (late_answers)."""
    late_answers: LateAnswers[dict] = LateAnswers()

    async def reply_to(body: dict) -> dict:
        try:
            return await handle(body)
        except RedisError as error:  # every click's state lives in Redis: one answer when it fails
            return dict(text=state_store_notice(error), replace_original=False, response_type="ephemeral")

    async def handle_within_ack_budget(ack: AsyncAck, body: dict, context: AsyncBoltContext,
                                       respond: AsyncRespond) -> None:
        async def reply_late(reply: dict) -> None:
            await respond(**reply)

        async def say_it_failed() -> None:
            await respond(text=LATE_FAILURE, replace_original=False, response_type="ephemeral")

        reply = await late_answers.within_budget(reply_to(body), reply_late, say_it_failed)
        if reply is not None:
            context[REPLY] = reply
        await ack()

    handle_within_ack_budget.__name__ = getattr(handle, "__name__", "handle_click")
    app.action(action_id)(ack=handle_within_ack_budget, lazy=[send_reply])
