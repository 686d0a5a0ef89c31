"""`tpubot docs`: write docs/commands.md from the command and action registries."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("docs", help="Write docs/commands.md (Slack /tpu commands and MCP tools) from the registries.")(docs)


def docs(
    root: Path = typer.Option(Path("."), "--root", help="the repository root to write docs/commands.md under"),
    check: bool = typer.Option(False, "--check", help="write nothing; exit 1 if the file differs from the registries"),
) -> None:
    from bot.docs import DOC_PATH, render_commands_doc, write_commands_doc

    if check:
        path = root / DOC_PATH
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != render_commands_doc():
            typer.echo(f"{path} is out of date; run `tpubot docs`.", err=True)
            raise typer.Exit(code=1)
        typer.echo(f"{path} is up to date.")
        return
    typer.echo(f"wrote {write_commands_doc(root)}")
