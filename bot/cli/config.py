"""`tpubot config`: the effective settings and where each value came from."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from bot.settings import Settings, describe_sources, env_file_path


def register(app: typer.Typer) -> None:
    app.command("config", help="Print the effective settings and their sources (secrets masked).")(show_config)


def show_config() -> None:
    console = Console()
    settings = Settings.load()  # a bad setting: one line from bot/cli/errors.py
    table = Table(title=f"tpubot settings ({'sandbox' if settings.sandbox else 'GCP project ' + settings.project})")
    table.add_column("variable")
    table.add_column("value")
    table.add_column("source")
    for name, value, source in describe_sources(settings):
        table.add_row(name, value, source)
    console.print(table)
    if not env_file_path().exists():
        console.print(f"[dim]{env_file_path()} not found: using defaults and the environment[/dim]")
