"""`tpubot config`: the effective settings and where each value came from."""

from __future__ import annotations

import typer
from bot.cli.output import Report, json_option_help, print_json, print_report
from bot.settings import Settings, describe_sources, env_file_path, setting_json


def register(app: typer.Typer) -> None:
    app.command("config", help="Print the effective settings and their sources (secrets masked).")(show_config)


def show_config(as_json: bool = typer.Option(False, "--json", help=json_option_help("config"))) -> None:
    settings = Settings.load()  # a bad setting: one line from bot/cli/errors.py
    rows = describe_sources(settings)
    env_file = env_file_path()
    if as_json:
        print_json({"sandbox": settings.mode.target.emulated_apis, "project": settings.project, "env_file": str(env_file),
                    "env_file_exists": env_file.exists(),
                    "settings": [{"variable": name, "value": setting_json(name.lower(), getattr(settings, name.lower())),
                                  "source": source} for name, _, source in rows]})
        return
    report = Report(title=f"tpubot settings ({settings.mode.target.label_for(settings.project)})",
                    columns=["variable", "value", "source"])
    for name, value, source in rows:
        report.add_row(name, value, source)
    if not env_file.exists():
        report.notes.append(f"{env_file} not found: using defaults and the environment")
    print_report(report)
