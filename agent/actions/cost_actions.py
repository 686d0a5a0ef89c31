"""estimate_cost: the channel lease's cost so far and to its deadline, $/M output tokens, capacity."""

from __future__ import annotations

import time
from datetime import timedelta

from pydantic import BaseModel, ConfigDict

from agent.lease import receipts
from agent.actions.run_context import RunContext
from agent.actions.registry import ActionKind, ActionResult, action
from agent.context import AlertingDeps
from infra import capacity, prices
from infra.bench_report import best_cells


class CostArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


_money = prices.money  # the one way to write an amount (infra/prices.py)


@action("estimate_cost", "Show what this channel's TPU has cost so far and will cost to its deadline, "
        "the dollars per million output tokens, and how many requests fit in the KV cache.", CostArgs,
        kind=ActionKind.READ)
async def estimate_cost(svc: AlertingDeps, run: RunContext, args: CostArgs) -> ActionResult:
    alerting, policy = svc.alerting, svc.policy
    lease = await svc.leases.get(run.actor.team, run.actor.channel)
    zone = lease.zone if lease else policy.default_zone
    price = receipts.price_for(alerting, policy.accelerator_type, zone)
    data: dict = {"zone": zone, "lease_id": lease.lease_id if lease else None}
    lines: list[str] = []
    if price is None:
        lines.append(f"No {alerting.policy.provisioning_model} price for {policy.accelerator_type} in "
                     f"{prices.region_of(zone)}; add it to PRICES in tpu.env.")
    else:
        rate = price.usd_per_chip_hour * alerting.policy.chips
        data["usd_per_hour"] = rate
        lines.append(f"*Rate:* {prices.hourly(rate)} ({policy.accelerator_type}, {'/'.join(price.key)}, "
                     f"as of {price.as_of.isoformat()}).")
        now = time.time()
        if lease is not None and lease.active_at:
            so_far = receipts.cost_so_far(alerting, policy.accelerator_type, lease, now) or 0.0
            to_go = receipts.cost_to_deadline(alerting, policy.accelerator_type, lease, now) or 0.0
            data.update(cost_so_far=so_far, cost_to_deadline=to_go)
            lines.append(f"*This channel's TPU* (lease `{lease.lease_id}`): {_money(so_far)} so far, "
                         f"{_money(to_go)} more to its deadline, {_money(so_far + to_go)} in all.")
        else:
            length = timedelta(seconds=lease.run_seconds) if lease and lease.run_seconds else policy.max_run
            total = prices.cost_for(price, length, chips=alerting.policy.chips)
            data["cost_full_run"] = total
            state = f"lease `{lease.lease_id}` is {lease.state.label}, not billed yet" if lease else "no TPU in this channel"
            lines.append(f"A {length.total_seconds() / 3600:g} h run costs {_money(total)} ({state}).")
        single, best = best_cells(await alerting.bench.latest(run.actor.team, run.actor.channel))
        if single or best:
            for key, label, cell in (("single", "at concurrency 1", single),
                                     ("best", "at the best measured batch", best)):
                if cell is None:
                    continue
                per_m = prices.usd_per_million_output_tokens(price, cell["output_throughput"],
                                                             chips=alerting.policy.chips)
                data[f"usd_per_m_{key}"] = per_m
                lines.append(f"*{_money(per_m)} per million output tokens* {label} (concurrency "
                             f"{cell['concurrency']}, context {cell['context']}, "
                             f"{cell['output_throughput']:.1f} tok/s).")
        else:
            lines.append("No benchmark of this endpoint yet, so no $/M output tokens (run `/tpu bench` here, or `tpubot bench --base-url …`).")
    plan = capacity.plan()
    data["capacity"] = {"kv_pool_gib": plan.kv_pool_gib, "kv_pool_tokens": plan.kv_pool_tokens,
                        "max_concurrent_requests": plan.max_concurrent_requests,
                        "context_tokens": plan.context_tokens}
    lines.append(f"*Capacity* ({plan.profile.accelerator_type}, {plan.model.name}): {plan.kv_pool_gib:.1f} GiB of KV cache = "
                 f"{plan.kv_pool_tokens:,} tokens, {plan.max_concurrent_requests} requests at once at "
                 f"{plan.context_tokens:,} tokens of context.")
    return ActionResult.done("\n".join(lines), data)
