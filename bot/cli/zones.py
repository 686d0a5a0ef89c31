"""`tpubot zones`: the zone scoreboard from Redis, in the order `/tpu up` would try the zones."""

from __future__ import annotations

import asyncio
import time

import typer

from bot.cli.output import Report, json_option_help, print_json, print_report
from bot.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("zones", help="Show the zone scoreboard: last outcome, when, median time to ACTIVE, skipped until.")(zones)


def zones(as_json: bool = typer.Option(False, "--json", help=json_option_help("zones"))) -> None:
    from agent.actions.zone_actions import zone_rows
    from bot.wiring import redis_client
    from handlers.cards import clock, duration
    from infra.scoreboard import ZoneScoreboard

    settings = Settings.load()
    if not settings.redis_url:
        typer.echo("REDIS_URL is unset: there is no shared scoreboard to read; showing the configured zones only.",
                   err=True)

    async def read():
        from infra.state.redis_server import ensure_redis

        endpoint = ensure_redis(settings.redis_url)
        redis = redis_client(endpoint.url)
        try:
            board = ZoneScoreboard(redis, settings.tpu_accelerator_type)
            rows = await board.rows(settings.tpu_zones)
            order = await board.order(settings.tpu_zones, settings.tpu_zone)
            return zone_rows(rows, order), order
        finally:
            await redis.aclose()
            endpoint.stop()

    data, order = asyncio.run(read())
    first = order.order[0] if order.order else None
    if as_json:
        print_json({"accelerator": settings.tpu_accelerator_type, "provisioning": "flex-start",
                    "tries_first": first, "zones": data})
        return
    now = time.time()
    report = Report(title=f"zone scoreboard ({settings.tpu_accelerator_type}, flex-start)",
                    columns=["#", "zone", "last outcome", "when", "median → ACTIVE", "attempts", "skipped until"],
                    right_aligned=frozenset({"#", "attempts"}))
    for row in data:
        report.add_row(
            str(row["search_rank"] or "–"), row["zone"],
            row["last_outcome"] or ("not offered" if row["offers"] is False else "—"),
            f"{duration(now - row['last_at'])} ago" if row["last_at"] else "—",
            duration(row["median_seconds_to_active"]) if row["median_seconds_to_active"] is not None else "—",
            str(row["attempts"]),
            f"{clock(row['skipped_until'])} ({row['skip_reason']})" if row["skipped_until"] else "—",
        )
    report.notes.append(f"`/tpu up` without a zone tries {first or 'nothing (every zone skipped or not offering the type)'} "
                        "first. Quota is not availability: only attempts count.")
    print_report(report)
