"""`tpubot mcp`: serve the actions to a terminal AI client over MCP (stdio); `--list` prints the tools."""

from __future__ import annotations

import asyncio
import logging

import typer


def register(app: typer.Typer) -> None:
    app.command("mcp", help="Serve the bot's actions over MCP on stdio (for terminal AI clients); "
                            "--list prints the tools.")(mcp)


def mcp(list_tools: bool = typer.Option(False, "--list", help="print the tools and exit")) -> None:
    if list_tools:
        typer.echo(tool_listing())
        return
    from bot.cli.processes import load_process_settings, start_logging
    from bot.mcp_server import serve_stdio

    settings = load_process_settings()
    # stdout is the protocol channel: every log line goes to stderr.
    start_logging(settings, logging.WARNING)
    asyncio.run(serve_stdio(settings))


def tool_listing() -> str:
    from agent.actions import REGISTRY
    from bot.mcp_server import mcp_tool, tool_label

    blocks = []
    for action in REGISTRY.values():
        tool = mcp_tool(action)
        lines = [f"{tool.name}  ({tool_label(action)})", f"    {tool.description}"]
        schema = tool.input_schema
        required = set(schema.get("required", []))
        for name, prop in schema.get("properties", {}).items():
            optional = "" if name in required else ", optional"
            lines.append(f"    {name}: {schema_type(prop)}{optional} — {prop.get('description', '')}".rstrip(" —"))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def schema_type(prop: dict) -> str:
    if "type" in prop:
        return prop["type"]
    kinds = [option.get("type", "?") for option in prop.get("anyOf", [])]
    return " | ".join(kind for kind in kinds if kind != "null") or "any"
