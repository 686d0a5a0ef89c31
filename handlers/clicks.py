"""What every button click carries — who clicked (re-checked by the actions, since anyone in
the channel can click) and the button's opaque value — and how a click is answered."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from slack_bolt.async_app import AsyncApp, AsyncBoltContext, AsyncRespond

from agent.context import Actor

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


def reply_after_ack(context: AsyncBoltContext, **message: object) -> None:
    """What `send_reply` posts to the click's response_url once the ack is out (respond()'s kwargs)."""
    context[REPLY] = message


async def send_reply(respond: AsyncRespond, context: AsyncBoltContext) -> None:
    message = context.get(REPLY)
    if message:
        await respond(**message)


def on_click(app: AsyncApp, action_id: str, handle: Callable[..., Awaitable[None]]) -> None:
    """Register `handle` (acks after its durable work) with `send_reply` as its lazy listener."""
    app.action(action_id)(ack=handle, lazy=[send_reply])
