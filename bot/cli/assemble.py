"""The typer app: the command modules' `register(app)` calls, assembled under one root with
`--version` and `--debug`, and click's plain help."""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Optional

import typer
from typer.core import TyperArgument, TyperCommand

from bot.cli.command_map import COMMANDS

# The modules whose `register(app)` add the commands, in the order `tpubot --help` lists them.
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))


class _UntypedArgument(TyperArgument):
    """An argument whose help shows its metavar (FILE) alone: `<str>` after it adds nothing."""

    def display_type_rich(self, ctx: object) -> str | None:
        return None


class PlainCommand(TyperCommand):
    """A command whose help names each option's value as a word (`--hours HOURS`), not a type
    (`<float>`), and whose summary in `tpubot --help` is never cut short."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            # typer's options are not click.Option subclasses: tell them by their is_flag attribute.
            if getattr(param, "is_flag", True) is False and param.metavar is None:
                param.metavar = (param.name or "value").upper()
            elif isinstance(param, TyperArgument):
                param.__class__ = _UntypedArgument  # typer built it; only its help line changes


def package_version(uninstalled: str = "unknown") -> str:
    try:
        return version("tpubot")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return uninstalled


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"tpubot {package_version()}")
        raise typer.Exit()


def new_app(module_names: tuple[str, ...] = COMMAND_MODULES) -> typer.Typer:
    new = typer.Typer(
        name="tpubot",
        help="Slack chat-ops for a Gemma 4 endpoint on a flex-start Cloud TPU v5e.",
        no_args_is_help=True,
        add_completion=False,
        # click's plain help and errors: no boxes that cut options at 80 columns, no `<bool>` type noise.
        rich_markup_mode=None,
        # No rich traceback: its locals would print the Settings object, secrets and all.
        pretty_exceptions_enable=False,
    )

    @new.callback()
    def _root(
        context: typer.Context,
        _version: Optional[bool] = typer.Option(None, "--version", callback=_show_version, is_eager=True,
                                                help="Print the version and exit."),
        debug: bool = typer.Option(False, "--debug", help="Show the traceback of a start-up error, not one line."),
    ) -> None:
        """Slack chat-ops for a Gemma 4 endpoint on a flex-start Cloud TPU v5e."""
        if context.obj is not None:
            context.obj.debug = debug

    for module_name in module_names:
        importlib.import_module(module_name).register(new)
    for command in new.registered_commands:
        command.cls = PlainCommand
        command.short_help = command.short_help or command.help
    return new
