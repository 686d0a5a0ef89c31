"""`tpubot reconcile`: one reconcile pass now (the worker also runs it at start and periodically)."""

from __future__ import annotations

import asyncio

import typer


def register(app: typer.Typer) -> None:
    app.command("reconcile", help="Repair Redis from the bot-labelled queued resources in GCP, once.")(reconcile_once)


def reconcile_once() -> None:
    from agent.lease.reconcile import reconcile
    from bot.cli.processes import load_settings
    from bot.wiring import build_services, slack_client_from

    settings = load_settings()
    if not settings.redis_url:
        typer.echo("REDIS_URL must be set: the pass repairs the shared Redis the web and worker processes use.", err=True)
        raise typer.Exit(code=2)

    async def run() -> str:
        services, redis, pool = await build_services(settings, redis_url=settings.redis_url, with_tpu=True,
                                                     slack_client=slack_client_from(settings))
        try:
            report = await reconcile(services)
        finally:
            await pool.aclose()
            await redis.aclose()
        return report.summary()

    typer.echo(asyncio.run(run()))
