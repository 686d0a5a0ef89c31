"""Admin actions: the audit trail and the force unlock escape hatch."""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field

from agent.actions.run_context import RunContext
from agent.actions.registry import ActionKind, ActionResult, action
from agent.context import ChannelDeps, LeaseDeps


class AuditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(15, ge=1, le=50, description="how many recent entries to show (1-50)")


class UnlockArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


@action("audit", "Show the most recent audited actions (admins only).", AuditArgs, kind=ActionKind.ADMIN)
async def audit(svc: ChannelDeps, run: RunContext, args: AuditArgs) -> ActionResult:
    entries = await svc.audit.recent(args.count)
    lines = [
        f"{datetime.fromtimestamp(e.at, tz=timezone.utc):%m-%d %H:%M:%S} <@{e.actor}> {e.action} "
        f"in <#{e.channel}> → {e.outcome}" for e in entries
    ]
    return ActionResult.done("\n".join(lines) or "The audit trail is empty.",
                             {"entries": [e.__dict__ for e in entries]})


@action("force_unlock", "Release this channel's operation lock if a crashed job left it held (admins only).",
        UnlockArgs, kind=ActionKind.ADMIN)
async def force_unlock(svc: LeaseDeps, run: RunContext, args: UnlockArgs) -> ActionResult:
    released = await svc.locks.force_unlock(run.actor.team, run.actor.channel)
    return ActionResult.done("Released this channel's operation lock." if released
                             else "This channel's operation lock was not held; nothing changed.")
