"""`tpubot dev`: serve + worker as separate processes on one shared Redis, with the sandboxes."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    app.command("dev", help="Run serve + worker locally as in production: one shared embedded Redis, "
                            "sandbox TPU/Logging/Slack/model unless real endpoints are set.")(dev)


def dev(
    port: int = typer.Option(0, help="port of the web process (default: PORT setting)"),
    workers: int = typer.Option(1, min=1, max=8, help="worker processes"),
) -> None:
    from bot.cli.processes import load_settings, start_logging
    from bot.dev_stack import DevStack

    settings = load_settings()
    start_logging(settings)
    stack = DevStack(settings, port=port or settings.port, workers=workers)
    try:
        stack.start()
        typer.echo("\n".join(stack.summary()))
        code = stack.wait()
    finally:
        stack.stop()
    raise typer.Exit(code=code)
