"""`tpubot mcp`: the action registry served to terminal AI clients over MCP (stdio).

Tools are generated from `agent.actions.REGISTRY` — name, description and the argument model's
JSON schema — so adding an action adds a tool and nothing is declared twice. The rules are the
actions' own: a tool call runs the same action function a `/tpu` command runs, as the MCP
identity from settings (`MCP_USER` in `MCP_TEAM`/`MCP_CHANNEL`), which is checked exactly like
a Slack user (the holder or an admin may tear down; one lease per channel).

What MCP adds is only the confirm step. In Slack a person clicks the confirm card; here every
call that changes something requires `confirm: true`, and the MCP client's own approval
prompt is that click. Without it the call is refused before any action runs. A call that only
reads never needs it (`oncall` without arguments shows the list; setting it needs confirm).

Two modes, said in the first tool result: without `REDIS_URL` the server runs the lease jobs
itself, on the embedded defaults `tpubot shell` uses (embedded Redis, sandbox cloud unless
GCP_PROJECT is set), so a provision reaches READY with nothing else running; with `REDIS_URL`
it acts on that deployment's leases and its workers do the work.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from redis.exceptions import RedisError

from agent.actions.run_context import RunContext
from agent.lease import lifecycle
from agent.actions import REGISTRY, Action, ActionKind, ActionResult, ActionStatus, get_action, run_action
from agent.actions import zone_actions
from agent.actions.lease_actions import TeardownOf, lease_summary
from agent.actions.registry import first_error, validate_args, wired_actions
from agent.actions.model_endpoint import run_redactor
from agent.context import Actor, Services
from bot.cli.assemble import package_version
from bot.settings import Settings
from infra.local_files import LocalFiles
from infra.state.leases import Lease

log = logging.getLogger(__name__)

SERVER_NAME = "tpubot"
CONFIRM = "confirm"
LEASES_URI = "tpubot://leases"
ZONES_URI = "tpubot://zones"
RESOURCE_NOT_FOUND = -32002  # the MCP spec's error code for an unknown resource URI

STATE_STORE_DOWN = "The state store is unavailable, so nothing changed. Try again in a minute."
INSTRUCTIONS = (
    "tpubot manages one flex-start Cloud TPU v5e running Gemma per Slack channel. Read-only tools "
    "are safe to call. Tools that change the TPU (provision, teardown) need `confirm: true`, which "
    "you should send only after the person approved that exact call."
)


# --- tools, generated from the registry ---------------------------------------------------


def needs_confirm(action: Action) -> bool:
    """Actions that change cloud resources need the person's approval, like Slack's confirm card.

    Admin actions (audit, force unlock) are gated by access control instead, as in Slack.
    """
    return action.kind is ActionKind.WRITE or action.destructive


def input_schema(action: Action) -> dict:
    schema = copy.deepcopy(action.tool_declaration()["function"]["parameters"])
    if needs_confirm(action) and action.reads_only is not None:
        # Some calls only read (oncall without arguments): confirm is asked of the others.
        schema.setdefault("properties", {})[CONFIRM] = {
            "type": "boolean",
            "description": "must be true for a call that changes something, set only after the person "
                           "approved it; not needed to show",
        }
    elif needs_confirm(action):
        schema.setdefault("properties", {})[CONFIRM] = {
            "type": "boolean",
            "description": "must be true: set it only after the person approved this call; "
                           "without it nothing happens",
        }
        schema["required"] = [*schema.get("required", []), CONFIRM]
    return schema


def tool_annotations(action: Action) -> types.ToolAnnotations:
    # MCP's destructiveHint means "not only additive". Provision is flagged too: it spends money
    # and takes the channel's one TPU slot, which is why the issue asks for a confirm on both.
    return types.ToolAnnotations(
        title=action.name,
        read_only_hint=action.read_only,
        destructive_hint=needs_confirm(action),
    )


def description(action: Action) -> str:
    if needs_confirm(action) and action.reads_only is not None:
        return f"{action.description} Showing is read-only; a change requires confirm: true after the person approved."
    if needs_confirm(action):
        return f"{action.description} Changes the channel's TPU: requires confirm: true after the person approved."
    return action.description


def mcp_tool(action: Action) -> types.Tool:
    return types.Tool(name=action.name, description=description(action), input_schema=input_schema(action),
                      annotations=tool_annotations(action))


def mcp_tools(svc: Services) -> list[types.Tool]:
    return [mcp_tool(action) for action in wired_actions(svc)]


def tool_label(action: Action, confirm: str = f"{CONFIRM}: true") -> str:
    """How `--list` and docs/commands.md describe a tool's class."""
    if action.read_only:
        return "read-only"
    label = "admin only" if action.kind is ActionKind.ADMIN else action.kind.value
    if needs_confirm(action) and action.reads_only is not None:
        return f"{label}, showing is read-only, a change needs {confirm}"
    return f"{label}, destructive, needs {confirm}" if needs_confirm(action) else label


# --- resources ----------------------------------------------------------------------------

RESOURCES = (
    types.Resource(uri=LEASES_URI, name="leases", mime_type="application/json",
                   description="Every channel's TPU lease: holder, state, zone, queued resource, endpoint, deadline."),
    types.Resource(uri=ZONES_URI, name="zones", mime_type="application/json",
                   description="The zones /tpu up may use, best first, with what is known about each."),
)


async def lease_list(session: "McpSession") -> dict:
    leases = sorted(await session.services.leases.all(), key=lambda lease: lease.created_at)
    return {"leases": [{"team": lease.team, "channel": lease.channel, **lease_summary(lease)} for lease in leases]}


async def zone_board(session: "McpSession") -> dict:
    result = await run_action(zone_actions.zones, session.services, session.actor, {})
    return {"source": "zone scoreboard", "ok": result.ok, "message": plain(result.text), **result.data}


RESOURCE_READERS: dict[str, Callable[["McpSession"], Awaitable[dict]]] = {LEASES_URI: lease_list, ZONES_URI: zone_board}


# --- tool calls ---------------------------------------------------------------------------


@dataclass
class McpSession:
    """What every request of one `tpubot mcp` process runs with."""

    services: Services
    actor: Actor
    mode: str = ""  # said once, in the first tool result
    mode_said: bool = False

    def first_words(self) -> str:
        """The mode line before the first tool result, then nothing."""
        if self.mode_said or not self.mode:
            return ""
        self.mode_said = True
        return self.mode


def actor_from(settings: Settings) -> Actor:
    return Actor(user_id=settings.mcp_user.strip(), team=settings.mcp_team.strip(), channel=settings.mcp_channel.strip())


def plain(text: str) -> str:
    """Slack markup (`<@U123>`, `<#C123>`, `<!subteam^S123|name>`) as a terminal reads it."""
    text = re.sub(r"<@([^>|]+)(\|[^>]*)?>", r"@\1", text)
    text = re.sub(r"<#([^>|]+)(\|[^>]*)?>", r"#\1", text)
    return re.sub(r"<!subteam\^([^>|]+)(\|[^>]*)?>", r"@\1", text)


def refusal(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], structured_content={"ok": False, "message": message},
                                is_error=True)


def tool_result(result: ActionResult) -> types.CallToolResult:
    message = plain(result.text)
    text = message if not result.data else f"{message}\n{json.dumps(result.data, default=str)}"
    return types.CallToolResult(content=[types.TextContent(text=text)],
                                structured_content={"ok": result.ok, "message": message, **result.data},
                                is_error=not result.ok)


async def confirm_teardown(svc: Services, actor: Actor, lease: Lease) -> ActionResult:
    """The same call the Slack confirm button makes, with the lease the request step named."""
    outcome = await lifecycle.confirm_teardown(svc, actor, lease.lease_id)
    data = lease_summary(outcome.lease) if outcome.lease else {}
    text = f"Tearing down {outcome.lease.qr_id}." if outcome.ok and outcome.lease else outcome.message
    return ActionResult(ActionStatus.done_if(outcome.ok), text, data)


async def call_tool(session: McpSession, name: str, arguments: dict | None) -> types.CallToolResult:
    result = await run_tool(session, name, arguments)
    mode = session.first_words()
    if mode:
        first = result.content[0]
        assert isinstance(first, types.TextContent), "tool_result and refusal answer in text"
        result.content[0] = types.TextContent(text=f"[{mode}]\n{first.text}")
        result.structured_content = {**(result.structured_content or {}), "mode": mode}
    return result


async def run_tool(session: McpSession, name: str, arguments: dict | None) -> types.CallToolResult:
    action = get_action(name)
    if action is None:
        return refusal(f"Unknown tool `{name}`. Tools: {', '.join(REGISTRY)}.")
    raw = dict(arguments or {})
    confirmed = raw.pop(CONFIRM, None) if needs_confirm(action) else None
    svc = session.services
    try:
        args = validate_args(action, raw, svc)
    except ValidationError as error:
        return refusal(f"{first_error(error)}. Nothing changed.")
    if needs_confirm(action) and not action.call_reads_only(args) and confirmed is not True:
        return refusal(f"`{name}` changes this channel's TPU, so it runs only with `confirm: true` "
                       "once the person has approved the call. Nothing changed.")
    try:
        # The caller is a model too: what it reads is scrubbed of the live lease keys as well.
        run = RunContext(session.actor, await run_redactor(svc))
        result = await run_action(name, svc, run, args)
        # An action that asks to confirm is finished by its confirm step (Slack: the button).
        if result.status is ActionStatus.NEEDS_CONFIRMATION:
            if not (isinstance(result.payload, TeardownOf) and result.payload.lease):
                return refusal(f"`{name}` needs a confirmation this server cannot give. Nothing changed.")
            result = await confirm_teardown(svc, session.actor, result.payload.lease)
    except RedisError:
        log.exception("state store unavailable during MCP tool %s", name)
        return refusal(STATE_STORE_DOWN)
    result.text = run.redactor(result.text)
    return tool_result(result)


async def read_resource(session: McpSession, uri: str) -> types.ReadResourceResult:
    reader = RESOURCE_READERS.get(uri)
    if reader is None:
        raise MCPError(RESOURCE_NOT_FOUND, f"Unknown resource {uri}; resources: {', '.join(RESOURCE_READERS)}")
    try:
        body = await reader(session)
    except RedisError:
        raise MCPError(RESOURCE_NOT_FOUND, STATE_STORE_DOWN) from None
    return types.ReadResourceResult(contents=[types.TextResourceContents(
        uri=uri, mime_type="application/json", text=json.dumps(body, default=str, indent=1))])


# --- the server ---------------------------------------------------------------------------


def mode_line(settings: Settings, *, local: bool) -> str:
    if not local:
        return ("shared mode: acting on the leases of the deployment at REDIS_URL; its workers run the lease jobs")
    cloud = settings.mode.target.label_for(settings.project, sandbox="sandbox GCP and Slack")
    return (f"local mode: REDIS_URL is unset, so this server runs the lease jobs itself on embedded defaults "
            f"(embedded Redis, {cloud}); nothing is shared with a deployed bot. Set REDIS_URL to the bot's "
            "Redis to act on its leases")


def build_server(settings: Settings, *, redis_url: str, mode: str = "") -> Server:
    @asynccontextmanager
    async def lifespan(_server: Server) -> AsyncIterator[McpSession]:
        from bot.wiring import build_services, slack_client_from

        # With a bot token, teardown refreshes the channel's Slack card from here too.
        client = slack_client_from(settings) if settings.slack_bot_token.get_secret_value() else None
        svc, redis, pool = await build_services(settings, redis_url=redis_url, slack_client=client)
        # Log files the client names by path are read under the directory it started us in.
        svc.local_files = LocalFiles(Path.cwd(), allow_outside=settings.mcp_read_outside_cwd)
        try:
            yield McpSession(svc, actor_from(settings), mode)
        finally:
            await pool.aclose()
            await redis.aclose()

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=mcp_tools(ctx.lifespan_context.services))

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await call_tool(ctx.lifespan_context, params.name, params.arguments)

    async def on_list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=list(RESOURCES))

    async def on_read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return await read_resource(ctx.lifespan_context, str(params.uri))

    instructions = f"{INSTRUCTIONS} This server is in {mode}." if mode else INSTRUCTIONS
    return Server(SERVER_NAME, version=package_version(uninstalled="0"), instructions=instructions, lifespan=lifespan,
                  on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                  on_list_resources=on_list_resources, on_read_resource=on_read_resource)


async def serve_stdio(settings: Settings) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        # Started after stdio_server moved fd 1 to stderr: a child's output cannot reach the wire.
        if settings.redis_url:
            server = build_server(settings, redis_url=settings.redis_url, mode=mode_line(settings, local=False))
            await server.run(read_stream, write_stream, server.create_initialization_options())
            return
        from bot.local_stack import LocalStack

        # No deployment to act on: run its worker here, on the embedded defaults `tpubot shell` uses.
        stack = await anyio.to_thread.run_sync(LocalStack(settings, run_web=False).start)
        log.warning("%s.", mode_line(stack.settings, local=True))
        assert stack.redis is not None, "a started stack has its Redis"
        try:
            server = build_server(stack.settings, redis_url=stack.redis.url, mode=mode_line(stack.settings, local=True))
            await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            await anyio.to_thread.run_sync(stack.stop)
