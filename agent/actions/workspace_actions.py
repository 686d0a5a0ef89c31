"""leases: every channel's TPU lease in the workspace (the App Home's list; read-only).

Cost so far uses the same arithmetic as receipts and alerts (agent/lease/receipts.py over the
settings' price table), so the Home tab, `/tpu cost` and the receipt never disagree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from agent.lease import receipts
from agent.actions.run_context import RunContext
from agent.actions.registry import ActionKind, ActionResult, action
from agent.context import AlertingDeps
from infra import prices
from infra.state.leases import Lease


@dataclass(frozen=True)
class LeaseRows:  # leases' payload: one row per lease, oldest first (the Home tab's list)
    rows: list[dict]


class LeasesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def lease_row(svc: AlertingDeps, lease: Lease, now: float) -> dict:
    cost = None
    if lease.active_at:
        cost = receipts.cost_so_far(svc.alerting, svc.policy.accelerator_type, lease, now)
    return {
        "lease_id": lease.lease_id, "channel": lease.channel, "holder": lease.holder, "state": lease.state.value,
        "zone": lease.zone, "deadline": lease.deadline or None, "created_at": lease.created_at,
        "active_at": lease.active_at or None, "endpoint": lease.endpoint or None, "cost_so_far": cost,
    }


@action("leases", "List every TPU lease in this Slack workspace, one per channel: channel, holder, state, zone, "
                  "deadline and cost so far.", LeasesArgs, kind=ActionKind.READ)
async def leases(svc: AlertingDeps, run: RunContext, args: LeasesArgs) -> ActionResult:
    now = time.time()
    mine = sorted((lease for lease in await svc.leases.all() if lease.team == run.actor.team),
                  key=lambda lease: lease.created_at)
    rows = [lease_row(svc, lease, now) for lease in mine]
    costs = [row["cost_so_far"] for row in rows if row["cost_so_far"] is not None]
    text = (f"{len(rows)} TPU lease{'s' * (len(rows) != 1)} in this workspace"
            + (f", {prices.money(sum(costs))} spent so far." if costs else ".") if rows
            else "No channel in this workspace holds a TPU. `/tpu up` in a channel starts one.")
    return ActionResult.done(text, {"leases": rows, "at": now}, LeaseRows(rows))
