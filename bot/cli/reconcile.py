"""`tpubot reconcile`: one reconcile pass now (the worker also runs it at start and periodically)."""

from __future__ import annotations

import asyncio
import dataclasses

import typer

from bot.cli.output import json_option_help, print_json


def register(app: typer.Typer) -> None:
    app.command("reconcile", help="Repair Redis from the bot-labelled queued resources in GCP, once.")(reconcile_once)


# The worker's pass takes a second or two; one that holds the lock longer is waiting on a slow cloud
# (each call is bounded), and the operator is better told than kept waiting.
DEFAULT_LOCK_WAIT_SECONDS = 60.0


def reconcile_once(as_json: bool = typer.Option(False, "--json", help=json_option_help("reconcile")),
                   wait: float = typer.Option(DEFAULT_LOCK_WAIT_SECONDS, "--wait", min=0, metavar="SECONDS",
                                              help="how long to wait for a pass already running (the worker's, "
                                                   "or another `tpubot reconcile`) to end before this one starts")
                   ) -> None:
    from agent.lease.reconcile import reconcile
    from bot.settings import Settings
    from bot.wiring import build_worker_services, slack_client_from

    settings = Settings.load()
    if not settings.redis_url:
        typer.echo("REDIS_URL must be set: the pass repairs the shared Redis the web and worker processes use.", err=True)
        raise typer.Exit(code=2)

    def say_we_wait() -> None:
        typer.echo(f"Another reconcile pass (the worker's, or another `tpubot reconcile`) is running; this one "
                   f"starts when it ends (waiting up to {wait:g}s).", err=True)

    async def run():
        svc, redis, pool = await build_worker_services(settings, redis_url=settings.redis_url,
                                                            slack_client=slack_client_from(settings))
        try:
            report = await reconcile(svc, wait_for_lock=wait, on_wait=say_we_wait)
        finally:
            await pool.aclose()
            await redis.aclose()
        return report

    report = asyncio.run(run())
    if as_json:
        print_json({"summary": report.summary(), **dataclasses.asdict(report)})
    elif not report.skipped:
        typer.echo(report.summary())
    if report.skipped:
        typer.echo(f"Nothing was repaired: another reconcile pass (the worker's, or another `tpubot reconcile`) "
                   f"held the lock for all of --wait {wait:g}s. Run `tpubot reconcile` again once it ends, or "
                   f"with a longer --wait.", err=True)
        raise typer.Exit(code=1)
