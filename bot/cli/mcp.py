"""`tpubot mcp`: serve the actions to a terminal AI client over MCP (stdio); `--list` prints the tools."""

from __future__ import annotations

import asyncio
import logging

import typer


def register(app: typer.Typer) -> None:
    app.command("mcp", help="Serve the bot's actions over MCP on stdio (for terminal AI clients); "
                            "--list prints the tools, --print-config the client configuration.")(mcp)


def mcp(list_tools: bool = typer.Option(False, "--list", help="print the tools and exit"),
        print_config: bool = typer.Option(False, "--print-config", help="print an MCP client's `mcpServers` entry "
                                          "for this install (the full path of this tpubot) and exit")) -> None:
    if list_tools:
        typer.echo(tool_listing())
        return
    if print_config:
        typer.echo(client_config())
        return
    from bot.cli.processes import load_process_settings, start_logging
    from bot.mcp_server import serve_stdio

    settings = load_process_settings()
    # stdout is the protocol channel: every log line goes to stderr.
    start_logging(settings, logging.WARNING)
    asyncio.run(serve_stdio(settings))


def client_config() -> str:
    """The `mcpServers` entry for this install: `command` is this venv's tpubot by its full path, so
    the client finds it whether or not the venv is on its PATH (a client starts it without a shell)."""
    import json
    import sys
    from pathlib import Path

    command = Path(sys.argv[0]).absolute() if Path(sys.argv[0]).name == "tpubot" else \
        Path(sys.executable).with_name("tpubot")
    return json.dumps({"mcpServers": {"tpubot-local": {"command": str(command), "args": ["mcp"], "env": {}}}},
                      indent=2)


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
