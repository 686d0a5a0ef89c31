"""`tpubot feedback [--days N] [--json]`: how the bot's answers were rated (👍/👎 under each answer,
issue 32), in total and per model, from the shared Redis. `--export-evals DIR` writes each answer
rated 👎 and corrected in its thread as an incident file for `tpubot eval --cases DIR`."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import typer

from infra.plurals import counted


def register(app: typer.Typer) -> None:
    app.command("feedback", help="Show how answers were rated (👍/👎): counts and the share of 👍, in total "
                                 "and per model.")(feedback)


def feedback(
    days: float = typer.Option(30.0, min=0.01, help="report answers rated in the last DAYS days"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    export_evals: Path | None = typer.Option(None, "--export-evals", metavar="DIR",
                                             help="write each answer rated 👎 with a correction replied in its "
                                                  "thread as an incident file for `tpubot eval --cases DIR`"),
) -> None:
    from bot.settings import Settings
    from bot.wiring import redis_client
    from infra.state.feedback import FeedbackReport, FeedbackStore

    settings = Settings.load()
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

    if export_evals is not None:
        _export(settings.redis_url, export_evals, as_json)
        return
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


def _export(redis_url: str, folder: Path, as_json: bool) -> None:
    from agent.evals.export import incident_toml
    from bot.wiring import redis_client
    from infra.state.feedback import Corrected, FeedbackStore

    if folder.exists() and not folder.is_dir():
        typer.echo(f"--export-evals {folder}: not a folder; name a folder to write the incident files in.", err=True)
        raise typer.Exit(code=2)

    async def read() -> list[Corrected]:
        redis = redis_client(redis_url)
        try:
            return await FeedbackStore(redis).corrected()
        finally:
            await redis.aclose()

    corrected = asyncio.run(read())
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for case in corrected:
        path = folder / f"feedback-{case.answer.answer_id}.toml"
        path.write_text(incident_toml(case), encoding="utf-8")
        written.append(str(path))
    if as_json:
        typer.echo(json.dumps({"written": written}, indent=2))
        return
    if not written:
        typer.echo("No answer was rated :-1: with a correction replied in its thread; nothing written.")
        return
    typer.echo(f"Wrote {counted(len(written), 'incident file')} to {folder}. Each holds the mention, its logs and the "
               "correction as a comment: fill in `facts` and `evidence_lines` from it, then run "
               f"`tpubot eval --cases {folder}`.")
