"""`tpubot zones`: the zone scoreboard from Redis, in the order `/tpu up` would try the zones."""

from __future__ import annotations

import asyncio
import time

import typer
from rich.console import Console
from rich.table import Table

from bot.cli.processes import load_settings


def register(app: typer.Typer) -> None:
    app.command("zones", help="Show the zone scoreboard: last outcome, when, median time to ACTIVE, skipped until.")(zones)


def zones() -> None:
    from agent.actions.zone_actions import zone_rows
    from bot.wiring import redis_client
    from handlers.cards import clock, duration
    from infra.scoreboard import ZoneScoreboard

    settings = load_settings()
    console = Console()
    if not settings.redis_url:
        console.print("[yellow]REDIS_URL is unset: there is no shared scoreboard to read; showing the configured "
                      "zones only.[/yellow]")

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
    now = time.time()
    table = Table(title=f"zone scoreboard ({settings.tpu_accelerator_type}, flex-start)")
    for column in ("#", "zone", "last outcome", "when", "median → ACTIVE", "attempts", "skipped until"):
        table.add_column(column, no_wrap=column == "zone")
    for row in data:
        table.add_row(
            str(row["search_rank"] or "–"), row["zone"],
            row["last_outcome"] or ("not offered" if row["offers"] is False else "—"),
            f"{duration(now - row['last_at'])} ago" if row["last_at"] else "—",
            duration(row["median_seconds_to_active"]) if row["median_seconds_to_active"] is not None else "—",
            str(row["attempts"]),
            f"{clock(row['skipped_until'])} ({row['skip_reason']})" if row["skipped_until"] else "—",
        )
    console.print(table)
    first = order.order[0] if order.order else "nothing (every zone skipped or not offering the type)"
    console.print(f"`/tpu up` without a zone tries {first} first. Quota is not availability: only attempts count.")
