"""`tpubot dev`: serve + worker as separate processes on one shared Redis, with the sandboxes."""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("dev", help="Run serve + worker locally as in production: one shared embedded Redis, "
                            "sandbox TPU/Logging/Slack/model unless real endpoints are set.")(dev)


def dev(
    port: Optional[int] = typer.Option(None, "--port", help="port of the web process (default: the PORT setting, "
                                       "3000 unless set)", show_default=False),
    workers: int = typer.Option(1, min=1, max=8, help="worker processes"),
) -> None:
    from bot.cli.processes import load_process_settings, port_option, start_logging
    from bot.dev_stack import DevStack

    settings = load_process_settings()
    port = port_option(port, settings)
    start_logging(settings)
    stack = DevStack(settings, port=port, workers=workers)
    try:
        stack.start()
        typer.echo("\n".join(stack.summary()))
        code = stack.wait()
    finally:
        stack.stop()
    raise typer.Exit(code=code)
