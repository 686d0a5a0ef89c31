"""`tpubot docs`: write the generated files — docs/commands.md from the command and action
registries, .env.example from the settings — or with `--check` fail when either has drifted."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import typer


def register(app: typer.Typer) -> None:
    app.command("docs", help="Write docs/commands.md (Slack /tpu commands and MCP tools) and .env.example "
                             "from the registries and settings.")(docs)


def generated_files() -> list[tuple[Path, Callable[[], str]]]:
    from bot.docs import DOC_PATH, render_commands_doc
    from bot.env_example import ENV_EXAMPLE_PATH, render_env_example

    return [(DOC_PATH, render_commands_doc), (ENV_EXAMPLE_PATH, render_env_example)]


def docs(
    root: Path = typer.Option(Path("."), "--root", help="the repository root to write the generated files under"),
    check: bool = typer.Option(False, "--check", help="write nothing; exit 1 if a file differs from its source"),
) -> None:
    stale = []
    for relative, render in generated_files():
        path = root / relative
        expected = render()
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if check:
            if current != expected:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expected, encoding="utf-8")
        typer.echo(f"wrote {path}")
    if check:
        for path in stale:
            typer.echo(f"{path} is out of date; run `tpubot docs`.", err=True)
        if stale:
            raise typer.Exit(code=1)
        typer.echo("generated files are up to date.")
