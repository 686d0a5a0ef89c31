"""`tpubot render-startup-script`: print exactly the startup script a create sends (it holds no secret)."""

from __future__ import annotations

import sys

import typer

from bot.cli.processes import load_settings


def register(app: typer.Typer) -> None:
    app.command("render-startup-script",
                help="Print the TPU VM startup script exactly as it is sent with every create.")(render)


def render() -> None:
    from bot.wiring import startup_script_from

    sys.stdout.write(startup_script_from(load_settings())(None))
