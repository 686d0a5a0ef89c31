"""The `tpubot` command line: one module per command group, each exposing `register(app)`;
`bot/cli/assemble.py` builds the typer app from them (not named `app.py`: importing a submodule
of that name would replace the `bot.cli.app` attribute with the module).

This package's own import loads nothing but the standard library: a lean command
(`tpubot digest`) runs without typer or pydantic, which would cost more memory than streaming
a million-line log does.

May import the rest of `bot/` (settings, wiring, the processes) and, through them, everything below.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from bot.cli.command_map import COMMANDS, command_of

# Commands that take their common invocations without typer (see `run_lean` in their module);
# a `None` from `run_lean` (`--help`, an option it does not take exactly) goes to typer.
LEAN_COMMANDS = frozenset({"digest"})


def __getattr__(name: str) -> Any:
    # `bot.cli.app`, every command registered, is built on first use (PEP 562) so that
    # importing this package for a lean command loads nothing else.
    if name == "app":
        from bot.cli.assemble import new_app

        globals()["app"] = built = new_app()
        return built
    if name == "package_version":
        from bot.cli.assemble import package_version

        return package_version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command in LEAN_COMMANDS:  # reads no settings, so there is no start-up error to shorten
        module = importlib.import_module(COMMANDS[command])
        code = module.run_lean(sys.argv[2:])
        if code is not None:
            sys.exit(code)
        from bot.cli.assemble import new_app

        new_app((COMMANDS[command],))()
        return
    from bot.cli import errors

    own_module = COMMANDS.get(command_of(sys.argv[1:]) or "")
    if own_module is None:  # `--help`, `--version`, or a word that is no command: the whole app answers
        errors.run(__getattr__("app"))
        return
    from bot.cli.assemble import new_app

    errors.run(new_app((own_module,)))
