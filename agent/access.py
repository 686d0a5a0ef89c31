"""Who may run which class of action, and where.

One check, applied wherever an action starts (a slash command, a button click, a model's
proposal being confirmed, an MCP call): the clicker of a button is checked, not the person who
asked for the card. A class with no users and no groups listed is open to everyone; a class
with no channels listed is allowed in every channel. Admins may do everything everywhere.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

from agent.actor import Actor


class ActionKind(str, enum.Enum):
    READ = "read"  # status, zones, cost, logs: safe to run on a model's say-so
    WRITE = "write"  # up, down: change cloud resources; a model may only propose them
    ADMIN = "admin"  # force unlock, oncall, audit


class GroupDirectory(Protocol):
    """The workspace's directory: user groups to members (usergroups.users.list), and the names of
    channels, for what is shown to people (conversations.info)."""

    async def members(self, group_id: str) -> frozenset[str]: ...

    async def channel_name(self, channel_id: str) -> str | None: ...


@dataclass(frozen=True)
class ClassRule:
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    channels: frozenset[str] = frozenset()

    @property
    def open_to_everyone(self) -> bool:
        return not self.users and not self.groups


@dataclass(frozen=True)
class AccessPolicy:
    admins: frozenset[str] = frozenset()
    admin_groups: frozenset[str] = frozenset()
    rules: dict[ActionKind, ClassRule] = field(default_factory=dict)

    def rule(self, kind: ActionKind) -> ClassRule:
        if kind is ActionKind.ADMIN:
            base = self.rules.get(ActionKind.ADMIN, ClassRule())
            return ClassRule(users=self.admins | base.users, groups=self.admin_groups | base.groups,
                             channels=base.channels)
        return self.rules.get(kind, ClassRule())


@dataclass(frozen=True)
class Decision:
    allowed: bool
    message: str = ""


async def _in_any_group(directory: GroupDirectory, groups: frozenset[str], user_id: str) -> bool:
    for group in sorted(groups):
        if user_id in await directory.members(group):
            return True
    return False


async def is_admin(policy: AccessPolicy, directory: GroupDirectory, user_id: str) -> bool:
    return user_id in policy.admins or await _in_any_group(directory, policy.admin_groups, user_id)


async def check(policy: AccessPolicy, directory: GroupDirectory, actor: Actor, kind: ActionKind,
                what: str) -> Decision:
    if await is_admin(policy, directory, actor.user_id):
        return Decision(True)
    rule = policy.rule(kind)
    if kind is ActionKind.ADMIN and rule.open_to_everyone:
        return Decision(False, f"`{what}` is an admin action and no admins are configured (set ADMINS).")
    if rule.channels and actor.channel not in rule.channels:
        where = ", ".join(f"<#{c}>" for c in sorted(rule.channels))
        return Decision(False, f"`{what}` ({kind.value} action) is only allowed in {where}.")
    if rule.open_to_everyone:
        return Decision(True)
    if actor.user_id in rule.users or await _in_any_group(directory, rule.groups, actor.user_id):
        return Decision(True)
    return Decision(False, f"`{what}` ({kind.value} action) is limited to {describe_who(rule, policy)}.")


def describe_who(rule: ClassRule, policy: AccessPolicy) -> str:
    people = [f"<@{u}>" for u in sorted(rule.users | policy.admins)]
    people += [f"<!subteam^{g}>" for g in sorted(rule.groups | policy.admin_groups)]
    return ", ".join(people) if people else "nobody (no one is configured)"
