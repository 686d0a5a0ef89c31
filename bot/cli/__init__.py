"""The `tpubot` command line: one module per command group, each exposing `register(app)`;
this file only assembles them into the typer app.

May import the rest of `bot/` (settings, wiring, the processes) and, through them, everything below.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="tpubot",
    help="Slack chat-ops for a Gemma 4 endpoint on a flex-start Cloud TPU v5e.",
    no_args_is_help=True,
    add_completion=False,
    # A traceback's locals would print the Settings object, secrets and all.
    pretty_exceptions_show_locals=False,
)

# One line per command module; a module's `register(app)` adds its commands.
COMMAND_MODULES: tuple[str, ...] = (
    "bot.cli.config",
    "bot.cli.digest",
    "bot.cli.capacity",
    "bot.cli.processes",
    "bot.cli.sandbox",
    "bot.cli.dev",
    "bot.cli.doctor",
    "bot.cli.zones",
    "bot.cli.startup",
    "bot.cli.reconcile",
    "bot.cli.mcp",
    "bot.cli.docs",
)


@app.callback()
def _root(
    context: typer.Context,
    debug: bool = typer.Option(False, "--debug", help="show the traceback of a start-up error, not one line"),
) -> None:
    """Slack chat-ops for a Gemma 4 endpoint on a flex-start Cloud TPU v5e."""
    if context.obj is not None:
        context.obj.debug = debug


def _register_all() -> None:
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(app)


_register_all()


def main() -> None:
    from bot.cli import errors

    errors.run(app)
