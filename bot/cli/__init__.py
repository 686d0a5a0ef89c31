"""The `tpubot` command line: one module per command group, each exposing `register(app)`;
this file only assembles them into the typer app.

May import the rest of `bot/` (settings, wiring, the processes) and, through them, everything below.
"""

from __future__ import annotations

import importlib
import sys

import typer

# One line per command module; a module's `register(app)` adds its commands.
COMMAND_MODULES: tuple[str, ...] = (
    "bot.cli.config",
    "bot.cli.digest",
    "bot.cli.capacity",
    "bot.cli.processes",
    "bot.cli.sandbox",
    "bot.cli.doctor",
    "bot.cli.zones",
    "bot.cli.startup",
    "bot.cli.reconcile",
    "bot.cli.mcp",
    "bot.cli.docs",
)
# Commands that run with only their own module loaded: `tpubot digest` streams logs of any size
# in a few MB and should not pay for the Slack and GCP clients the others import (~30 MB).
LEAN_COMMANDS: dict[str, str] = {"digest": "bot.cli.digest"}


def _new_app() -> typer.Typer:
    new = typer.Typer(
        name="tpubot",
        help="Slack chat-ops for a Gemma 4 endpoint on a flex-start Cloud TPU v5e.",
        no_args_is_help=True,
        add_completion=False,
    )

    @new.callback()
    def _root() -> None:
        """Slack chat-ops for a Gemma 4 endpoint on a flex-start Cloud TPU v5e."""

    return new


def _full_app() -> typer.Typer:
    full = _new_app()
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(full)
    return full


def __getattr__(name: str) -> typer.Typer:
    # `bot.cli.app`, every command registered, is built on first use (PEP 562) so that
    # importing this package for a lean command loads nothing else.
    if name == "app":
        globals()["app"] = built = _full_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command in LEAN_COMMANDS:
        lean = _new_app()
        importlib.import_module(LEAN_COMMANDS[command]).register(lean)
        lean()
    else:
        __getattr__("app")()
