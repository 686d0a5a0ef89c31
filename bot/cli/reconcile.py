"""`tpubot reconcile`: one reconcile pass now (the worker also runs it at start and periodically)."""

from __future__ import annotations

import asyncio
import dataclasses

import typer

from bot.cli.output import json_option_help, print_json


def register(app: typer.Typer) -> None:
    app.command("reconcile", help="Repair Redis from the bot-labelled queued resources in GCP, once.")(reconcile_once)


def reconcile_once(as_json: bool = typer.Option(False, "--json", help=json_option_help("reconcile"))) -> None:
    from agent.lease.reconcile import reconcile
    from bot.settings import Settings
    from bot.wiring import build_worker_services, slack_client_from

    settings = Settings.load()
    if not settings.redis_url:
        typer.echo("REDIS_URL must be set: the pass repairs the shared Redis the web and worker processes use.", err=True)
        raise typer.Exit(code=2)

    async def run():
        svc, redis, pool = await build_worker_services(settings, redis_url=settings.redis_url,
                                                            slack_client=slack_client_from(settings))
        try:
            report = await reconcile(svc)
        finally:
            await pool.aclose()
            await redis.aclose()
        return report

    report = asyncio.run(run())
    if as_json:
        print_json({"summary": report.summary(), **dataclasses.asdict(report)})
    else:
        typer.echo(report.summary())
