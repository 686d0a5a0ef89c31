"""zones: the zone scoreboard as the search sees it (read-only)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from agent.actions.run_context import RunContext
from agent.actions.registry import ActionKind, ActionResult, action
from agent.context import ZoneDeps


class ZonesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class ZoneBoard:  # zones' payload: the rows in search order, and the zones a `/tpu up` would try
    zones: list[dict]
    order: list[str]


def zone_rows(rows, order) -> list[dict]:
    """Rows in search order: zones a `/tpu up` would try, then skipped ones, then those not offering the type."""
    by_zone = {row.zone: row for row in rows}
    ranked = list(order.order) + [zone for zone, _ in order.skipped] + list(order.not_offered)
    ranked += [row.zone for row in rows if row.zone not in ranked]
    out = []
    for zone in ranked:
        row = by_zone[zone]
        out.append({
            "zone": zone,
            "offers": row.offers,
            "attempts": row.attempts,
            "last_outcome": row.last_outcome or None,
            "last_at": row.last_at or None,
            "median_seconds_to_active": row.median_seconds_to_active,
            "skipped_until": row.skip.until if row.skip else None,
            "skip_reason": f"{row.skip.outcome} ({row.skip.scope})" if row.skip else None,
            "search_rank": order.order.index(zone) + 1 if zone in order.order else None,
        })
    return out


@action("zones", "Show the zone scoreboard: per zone the last outcome, when, median time to ACTIVE and "
                 "skipped-until, in the order /tpu up would try them.", ZonesArgs, kind=ActionKind.READ)
async def zones(svc: ZoneDeps, run: RunContext, args: ZonesArgs) -> ActionResult:
    rows = await svc.scoreboard.rows(svc.policy.zones)
    order = await svc.scoreboard.order(svc.policy.zones, svc.policy.default_zone)
    data = zone_rows(rows, order)
    tried = [r for r in data if r["attempts"]]
    first = order.order[0] if order.order else None
    text = (f"{len(data)} configured zones, {len(tried)} with a record; a /tpu up without a zone tries "
            + (f"{first} first." if first else "no zone right now (all skipped or not offering the type)."))
    board = ZoneBoard(data, list(order.order))
    return ActionResult.done(text, {"zones": board.zones, "order": board.order}, board)
