"""`tpubot feedback [--days N] [--json]`: how the bot's answers were rated (👍/👎 under each answer,
issue 32), in total and per model, from the shared Redis."""

from __future__ import annotations

import asyncio
import json
import time

import typer


def register(app: typer.Typer) -> None:
    app.command("feedback", help="Show how answers were rated (👍/👎): counts and the share of 👍, in total "
                                 "and per model.")(feedback)


def feedback(
    days: float = typer.Option(30.0, min=0.01, help="report answers rated in the last DAYS days"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    from bot.cli.processes import load_settings
    from bot.wiring import redis_client
    from infra.state.feedback import FeedbackReport, FeedbackStore

    settings = load_settings()
    if not settings.redis_url:
        typer.echo("REDIS_URL must be set: ratings are read from the shared Redis the web and worker processes use.",
                   err=True)
        raise typer.Exit(code=2)

    async def read() -> FeedbackReport:
        redis = redis_client(settings.redis_url)
        try:
            return await FeedbackStore(redis).report(since=time.time() - days * 86_400)
        finally:
            await redis.aclose()

    report = asyncio.run(read())
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
        return
    if not report.answers:
        typer.echo(f"No answers were rated in the last {days:g} days.")
        return
    typer.echo(f"Ratings of {report.answers} answers in the last {days:g} days:")
    for name, tally in [("all", report.total), *sorted(report.models.items())]:
        share = f"{tally.ratio:.0%} useful" if tally.ratio is not None else "no votes"
        typer.echo(f"  {name}: {tally.up} up, {tally.down} down ({share})")
