"""oncall: who is paged for this channel's TPU alerts (show, set, clear)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.lease import oncall
from agent.actions.run_context import RunContext
from agent.actions.registry import ActionKind, ActionResult, ActionStatus, action
from agent.context import AlertingDeps


class OnCallArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mentions: list[str] = Field(
        default_factory=list,
        description="Slack mentions to page, e.g. <!subteam^S123> or <@U123>; empty shows the current list",
    )
    clear: bool = Field(False, description="true: forget the list, so alerts page the lease holder again")

    @field_validator("mentions")
    @classmethod
    def _mentions(cls, value: list[str]) -> list[str]:
        try:
            return oncall.normalize_mentions(value)
        except oncall.MentionError as error:
            raise ValueError(str(error)) from None


def shows_only(args: OnCallArgs) -> bool:
    """No mentions and no clear: the call shows the list and changes nothing."""
    return not args.mentions and not args.clear


# WRITE, not ADMIN: the rule "the lease holder or an admin" lives in agent/lease/oncall.py, and the
# access layer would stop a holder at an ADMIN gate before that rule runs.
@action("oncall", "Show or set who is paged for this channel's TPU alerts (holder or admin to change).",
        OnCallArgs, kind=ActionKind.WRITE, reads_only=shows_only)
async def set_oncall(svc: AlertingDeps, run: RunContext, args: OnCallArgs) -> ActionResult:
    if shows_only(args):
        outcome = await oncall.show_oncall(svc, run.actor)
    else:
        outcome = await oncall.set_oncall(svc, run.actor, args.mentions, clear=args.clear)
    return ActionResult(ActionStatus.done_if(outcome.ok), outcome.text, {"oncall": list(outcome.mentions), "default": outcome.default})
