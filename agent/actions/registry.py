"""Action declarations: name, description, pydantic argument model, kind, and the function.

The argument model's JSON schema is the tool declaration (MCP gets it as is). The model gets
`model_tool_declaration()`: the same schema in the shape Gemma 4's chat template can print —
every parameter one plain `type` (plus `nullable: true`), because the template renders
`anyOf[T, null]` with an empty type and a type list as Python text, drops `default`,
`minimum`/`maximum` and shows `enum` only for strings; those go into the description instead.
vLLM's gemma4 parser types values by the same schema, so `hours: 2` still arrives as a number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Awaitable, Callable, TypeVar

from pydantic import BaseModel, ValidationError

from agent import access
from agent.access import ActionKind
from agent.actions.run_context import RunContext
from agent.context import Actor, AgentDeps, ChannelDeps, Services


class Declined(StrEnum):
    """Why an action did nothing, where a caller words it its own way (the `/tpu up` reply's icon)."""

    PREFLIGHT_FAILED = "preflight_failed"  # the last `tpubot doctor` run found blockers
    BUDGET = "budget"  # the worst case does not fit a budget
    NOT_IN_CHANNEL = "not_in_channel"  # the bot cannot post the channel's status card


class ActionStatus(StrEnum):
    """What one action call came to. The value is the outcome the audit trail and
    `tpubot_actions_total` record, so a result, its audit entry and its metric never disagree."""

    DONE = "ok"
    NEEDS_CONFIRMATION = "needs_confirmation"  # nothing done yet: the caller shows a confirm step first
    REFUSED = "refused"  # the action ran and did nothing (a held lease, no endpoint); `text` says why
    DENIED = "denied"  # access control refused the actor; `text` says who may
    FAILED = "error"  # the action raised: audited, and the exception goes on to the caller

    @classmethod
    def done_if(cls, ok: bool) -> ActionStatus:
        return cls.DONE if ok else cls.REFUSED


@dataclass
class ActionResult:
    status: ActionStatus
    text: str  # a plain summary for people and for the model
    # What a model reads beside `text`, as is: the mention agent's tool result, MCP's structured content.
    # No caller outside those two edges reads its keys: what a caller decides by is the typed `payload`,
    # so the model's view can change without moving a decision.
    data: dict = field(default_factory=dict)
    # The typed object a caller decides by, one class per meaning (a `Declined` reason, the lease a
    # teardown asks to confirm, a zone board); callers match on its type, never on the action's name.
    payload: object = None

    @property
    def ok(self) -> bool:
        return self.status is ActionStatus.DONE

    @classmethod
    def done(cls, text: str, data: dict | None = None, payload: object = None) -> ActionResult:
        return cls(ActionStatus.DONE, text, data or {}, payload)

    @classmethod
    def refused(cls, text: str, data: dict | None = None, payload: object = None) -> ActionResult:
        return cls(ActionStatus.REFUSED, text, data or {}, payload)


ActionFn = Callable[[Services, RunContext, Any], Awaitable[ActionResult]]
# An action as written: its first parameter is the narrowest view of Services it reads, kept by the
# decorator so a direct caller sees that view too.
ActionImpl = TypeVar("ActionImpl", bound=ActionFn)


@dataclass(frozen=True)
class Action:
    name: str
    description: str
    args: type[BaseModel]
    run: ActionFn
    kind: ActionKind = ActionKind.READ
    destructive: bool = False
    # For a WRITE action some calls of which only read (`oncall` without arguments shows the list):
    # True for those calls, so a confirm step (MCP's `confirm: true`) is asked only for the others.
    reads_only: Callable[[Any], bool] | None = None  # called with the action's own `args` model
    # Whether this deployment has the backend the action reads (Cloud Logging may be absent): one
    # that is not wired is offered to no model or MCP client (`wired_actions`).
    wired: Callable[[AgentDeps], bool] = lambda svc: True

    @property
    def read_only(self) -> bool:
        return self.kind is ActionKind.READ

    def call_reads_only(self, args: BaseModel) -> bool:
        return self.read_only or (self.reads_only is not None and self.reads_only(args))

    def tool_declaration(self) -> dict:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": schema}}


    def model_tool_declaration(self) -> dict:
        """The declaration sent to Gemma: every parameter one plain type (see module doc)."""
        declaration = self.tool_declaration()
        params = declaration["function"]["parameters"]
        params["properties"] = {k: plain_parameter(v) for k, v in params.get("properties", {}).items()}
        return declaration


_BOUNDS = (("minimum", "at least"), ("exclusiveMinimum", "more than"), ("maximum", "at most"),
           ("exclusiveMaximum", "less than"))
_MOVED_TO_DESCRIPTION = ("default", *(key for key, _ in _BOUNDS))


def plain_parameter(schema: dict) -> dict:
    """One parameter's schema as `type` + `nullable`, with its default, range and non-string
    choices said in the description (the template would drop them)."""
    out = dict(schema)
    out.pop("title", None)
    members = out.pop("anyOf", None) or out.pop("oneOf", None)
    if members:
        real = [m for m in members if m.get("type") != "null"]
        if len(real) == 1:
            out = {**{k: v for k, v in real[0].items() if k != "title"}, **out}
        if len(real) < len(members):
            out["nullable"] = True
    if isinstance(out.get("type"), list):
        types = [t for t in out["type"] if t != "null"]
        if len(types) < len(out["type"]):
            out["nullable"] = True
        out["type"] = types[0] if types else "string"
    notes = _limits(out)
    if out.get("enum") and out.get("type") != "string":
        notes.append("one of " + ", ".join(str(v) for v in out.pop("enum")))
    for key in _MOVED_TO_DESCRIPTION:
        out.pop(key, None)
    if notes:
        description = out.get("description", "")
        out["description"] = f"{description} ({'; '.join(notes)})" if description else "; ".join(notes)
    return out


def _limits(schema: dict) -> list[str]:
    notes = []
    bounds = [f"{words} {schema[key]}" for key, words in _BOUNDS if key in schema]
    if bounds:
        notes.append(", ".join(bounds))
    default = schema.get("default")
    if default not in (None, "", [], {}):
        notes.append(f"default {json.dumps(default)}")
    return notes


REGISTRY: dict[str, Action] = {}


def action(name: str, description: str, args: type[BaseModel], *, kind: ActionKind = ActionKind.READ,
           destructive: bool = False, reads_only: Callable[[Any], bool] | None = None,
           wired: Callable[[AgentDeps], bool] = lambda svc: True) -> Callable[[ActionImpl], ActionImpl]:
    def register(fn: ActionImpl) -> ActionImpl:
        if name in REGISTRY:
            raise ValueError(f"action {name} declared twice")
        REGISTRY[name] = Action(name, description, args, fn, kind, destructive, reads_only, wired)
        return fn

    return register


def wired_actions(svc: AgentDeps) -> list[Action]:
    """The actions whose backends this deployment has: what the model and MCP clients are offered."""
    return [a for a in REGISTRY.values() if a.wired(svc)]


def get_action(name: str) -> Action | None:
    return REGISTRY.get(name)


def validate_args(action_: Action, raw: dict, svc: ChannelDeps) -> BaseModel:
    """Raises pydantic.ValidationError; the policy is available to validators as context."""
    return action_.args.model_validate(raw, context={"policy": svc.policy})


async def run_action(which: str | ActionFn, svc: Services, who: Actor | RunContext,
                     raw_args: dict | BaseModel) -> ActionResult:
    """The one entry to every action: access check, argument validation, run, audit. `which` is the
    action's function (`lease_actions.teardown`), or its name where a name arrives (a model's tool call,
    MCP, a `/tpu` subcommand): a caller inside the bot names no action by a string it could misspell.
    `who`: an agent run's context, or just the actor (no material; the services' redactor)."""
    action_ = REGISTRY[which] if isinstance(which, str) else next(a for a in REGISTRY.values() if a.run is which)
    run = who if isinstance(who, RunContext) else RunContext(who, svc.redactor)
    actor = run.actor
    name = action_.name
    decision = await access.check(svc.access, svc.directory, actor, action_.kind, name)
    if not decision.allowed:
        await _audit(svc, actor, name, ActionStatus.DENIED, decision.message)
        return ActionResult(ActionStatus.DENIED, decision.message)
    args = raw_args if isinstance(raw_args, BaseModel) else validate_args(action_, raw_args, svc)
    try:
        result = await action_.run(svc, run, args)
    except Exception as error:
        await _audit(svc, actor, name, ActionStatus.FAILED, type(error).__name__)
        raise
    await _audit(svc, actor, name, result.status, result.text)
    return result


async def _audit(svc: AgentDeps, actor: Actor, name: str, outcome: ActionStatus, detail: str) -> None:
    svc.metrics.actions.labels(name, outcome.value).inc()
    await svc.audit.record(actor=actor.user_id, action=name, team=actor.team, channel=actor.channel,
                           outcome=outcome.value, detail=detail)


def first_error(error: ValidationError) -> str:
    problem = error.errors()[0]
    where = ".".join(str(p) for p in problem.get("loc", ()) if p != "__root__")
    message = problem["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where and where not in message else message
