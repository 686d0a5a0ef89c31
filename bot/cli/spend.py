"""`tpubot spend [MONTH] [--json]`: a month's TPU spend per channel from the shared ledger, the same
figures as `/tpu spend` and the App Home (agent/lease/budget.py)."""

from __future__ import annotations

import asyncio
import json
import time

import typer


def register(app: typer.Typer) -> None:
    app.command("spend", help="Show a month's TPU spend per channel: leases, TPU hours, USD, $/M output tokens, "
                              "idle hours.")(spend)


def spend(
    month: str = typer.Argument("", help="calendar month as YYYY-MM (UTC); empty: this month"),
    team: str = typer.Option("", help="Slack team id; empty: every team with spend that month"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    from agent.actions.spend_actions import MONTH_RE, spend_table
    from agent.lease import budget
    from bot.settings import Settings
    from bot.wiring import build_services
    from infra.state import keys
    from infra.state.spend import month_of

    month = month or month_of(time.time())
    if not MONTH_RE.match(month):
        typer.echo(f"`{month}` is not a month; write it as YYYY-MM, like {month_of(time.time())}.", err=True)
        raise typer.Exit(code=2)
    settings = Settings.load()
    if not settings.redis_url:
        typer.echo("REDIS_URL must be set: spend is read from the shared Redis the web and worker processes use.",
                   err=True)
        raise typer.Exit(code=2)

    async def read() -> list[budget.MonthSpend]:
        svc, redis, pool = await build_services(settings, redis_url=settings.redis_url)
        try:
            teams = {team} if team else set()
            if not team:
                prefix, suffix = keys.spend_ledger("", month).split("::")
                async for key in redis.scan_iter(match=keys.spend_ledger("*", month)):
                    name = key.decode() if isinstance(key, bytes) else key
                    teams.add(name[len(prefix) + 1:-len(suffix) - 1])
                teams |= {lease.team for lease in await svc.leases.all() if month_of(lease.created_at) == month}
            return [await budget.month_spend(svc, t, month) for t in sorted(teams)]
        finally:
            await pool.aclose()
            await redis.aclose()

    reports = asyncio.run(read())
    if as_json:
        typer.echo(json.dumps({"month": month, "teams": [report.as_dict() for report in reports]}, indent=2))
        return
    if not reports:
        typer.echo(f"No TPU spend in {month}.")
    for report in reports:
        typer.echo(f"TPU spend in {month}, team {report.team} (USD; running TPUs counted so far):")
        typer.echo(spend_table(report))
