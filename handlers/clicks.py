"""What every button click carries: who clicked (re-checked by the actions, since anyone in
the channel can click) and the button's opaque value."""

from __future__ import annotations

from agent.context import Actor

MAX_VALUE = 64  # our values are ids; anything longer is not one of ours


def clicker(body: dict) -> Actor:
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id", "")
    team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id", "")
    return Actor(user_id=body["user"]["id"], team=team, channel=channel)


def clicked_value(body: dict) -> str:
    return str(body["actions"][0].get("value", ""))[:MAX_VALUE]
