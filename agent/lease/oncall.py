"""Who gets paged for a channel, and what clicking an alert's buttons means.

`/tpu oncall @group-or-user…` stores Slack mention tokens per channel. Slack sends user groups
as `<!subteam^S123|@name>` and users as `<@U123|name>` (when the slash command escapes them);
plain `@name` text cannot be resolved and is refused. Without a stored list, alerts page the
lease holder. Only the channel's lease holder or an admin may change the list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent import access
from agent.lease.alerts import ACK_DEADLINE, ACK_IDLE

if TYPE_CHECKING:
    from agent.context import Actor, AlertingDeps

MAX_ONCALL = 10
_SUBTEAM = re.compile(r"^<!subteam\^([A-Z0-9]{1,24})(?:\|[^<>|]{0,80})?>$")
_USER = re.compile(r"^<@([UW][A-Z0-9]{1,24})(?:\|[^<>|]{0,80})?>$")
ACK_KINDS = (ACK_DEADLINE, ACK_IDLE)


class MentionError(ValueError):
    """A token that is not a Slack user or user-group mention; the message says why."""


def normalize_mention(token: str) -> str:
    """`<!subteam^S1|@sre>` -> `<!subteam^S1>`, `<@U1|ann>` -> `<@U1>`; anything else raises."""
    token = token.strip()
    if match := _SUBTEAM.match(token):
        return f"<!subteam^{match.group(1)}>"
    if match := _USER.match(token):
        return f"<@{match.group(1)}>"
    shown = token[:40].replace("<", "").replace(">", "").replace("`", "'")
    if token.startswith("@"):
        raise MentionError(f"`{shown}` arrived as plain text, not a mention; pick the person or group from "
                           "Slack's autocomplete so it becomes a link")
    raise MentionError(f"`{shown}` is not a user or user-group mention (like @sre-oncall or @ann)")


def normalize_mentions(tokens: list[str]) -> list[str]:
    seen: list[str] = []
    for token in tokens:
        mention = normalize_mention(token)
        if mention not in seen:
            seen.append(mention)
    if len(seen) > MAX_ONCALL:
        raise MentionError(f"at most {MAX_ONCALL} people or groups can be on call; got {len(seen)}")
    return seen


@dataclass(frozen=True)
class OnCallOutcome:
    ok: bool
    text: str
    mentions: tuple[str, ...] = ()
    default: bool = False  # the holder is paged because nothing is stored
    changed: bool = True  # False: a repeated acknowledgement (nothing new recorded)


async def show_oncall(svc: "AlertingDeps", actor: "Actor") -> OnCallOutcome:
    stored = await svc.alerting.oncall.get(actor.team, actor.channel)
    if stored:
        return OnCallOutcome(True, f"On call for this channel: {' '.join(stored)}.", tuple(stored))
    lease = await svc.leases.get(actor.team, actor.channel)
    who = f"the lease holder (now <@{lease.holder}>)" if lease and lease.holder else "the lease holder"
    return OnCallOutcome(True, f"Nobody is set; alerts page {who}. Set it with `/tpu oncall @group-or-user…`.",
                         default=True)


async def set_oncall(svc: "AlertingDeps", actor: "Actor", mentions: list[str], *, clear: bool = False) -> OnCallOutcome:
    lease = await svc.leases.get(actor.team, actor.channel)
    holder = bool(lease and lease.holder == actor.user_id)
    if not holder and not await access.is_admin(svc.access, svc.directory, actor.user_id):
        who = f"<@{lease.holder}> (the holder) or an admin" if lease and lease.holder else "an admin"
        return OnCallOutcome(False, f"Only {who} can change who is paged for this channel; nothing changed.")
    if clear:
        await svc.alerting.oncall.clear(actor.team, actor.channel)
        text = "On-call list cleared; alerts page the lease holder."
    else:
        await svc.alerting.oncall.set(actor.team, actor.channel, mentions)
        text = f"Alerts for this channel now page {' '.join(mentions)}."
    await svc.audit.record(actor=actor.user_id, action="oncall", team=actor.team, channel=actor.channel,
                           outcome="cleared" if clear else "set", detail=" ".join(mentions))
    return OnCallOutcome(True, text, tuple(mentions))


async def acknowledge(svc: "AlertingDeps", actor: "Actor", lease_id: str, kind: str) -> OnCallOutcome:
    """Anyone in the channel may acknowledge; only the first acknowledgement is recorded."""
    if kind not in ACK_KINDS:
        return OnCallOutcome(False, "That button is not an alert acknowledgement; nothing changed.", changed=False)
    lease = await svc.leases.get_by_id(actor.team, actor.channel, lease_id)
    if lease is None:
        return OnCallOutcome(False, "That TPU is already gone; nothing to acknowledge.", changed=False)
    first = await svc.alerting.marks.acknowledge(lease_id, kind, actor.user_id)
    await svc.audit.record(actor=actor.user_id, action="acknowledge", team=actor.team, channel=actor.channel,
                           outcome=kind if first else "repeat", detail=lease_id)
    if kind == ACK_IDLE:
        text = f"<@{actor.user_id}> acknowledged: the idle TPU is kept until its deadline."
    else:
        text = f"<@{actor.user_id}> acknowledged: no more warnings before the deadline."
    if not first:
        text = "Already acknowledged; nothing changed."
    return OnCallOutcome(True, text, changed=first)
