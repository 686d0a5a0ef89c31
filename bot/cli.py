"""The `tpubot` command line. Each group of commands lives in its own `bot/cli_*.py` module
that exposes `register(app)`; this file only assembles them."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="tpubot",
    help="Slack chat-ops for a Gemma 4 endpoint on a flex-start Cloud TPU v5e.",
    no_args_is_help=True,
    add_completion=False,
)

# One line per command module; a module's `register(app)` adds its commands.
COMMAND_MODULES: tuple[str, ...] = (
    "bot.cli_config",
    "bot.cli_digest",
    "bot.cli_capacity",
    "bot.cli_run",
    "bot.cli_sandbox",
    "bot.cli_doctor",
    "bot.cli_zones",
    "bot.cli_startup",
    "bot.cli_reconcile",
    "bot.cli_mcp",
    "bot.cli_docs",
)


@app.callback()
def _root() -> None:
    """Slack chat-ops for a Gemma 4 endpoint on a flex-start Cloud TPU v5e."""


def _register_all() -> None:
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(app)


_register_all()


def main() -> None:
    app()
