"""What a lease cost: the running figure alerts quote and the receipt posted when it ends.

Rates come from the price table in settings (infra/prices.py; by accelerator, region and
provisioning model) — no rate lives here. A lease is billed from ACTIVE (when the VM exists)
until it ended, and never past its flex-start deadline (the cloud deletes the VM then).
Usage (requests, output tokens) comes from the idle clock's vLLM readings, refreshed with a
last live reading when the endpoint still answers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

from agent.context import Alerting
from infra import prices
from infra.state.alerts import Ack
from infra.state.leases import Lease
from infra.vllm_metrics import read_usage

log = logging.getLogger(__name__)

LIVE_READ_TIMEOUT = 2.0  # the receipt waits at most this long for a last look at vLLM's counters


@dataclass(frozen=True)
class Receipt:
    lease_id: str
    zone: str
    qr_id: str
    reason: str
    ended_at: float
    billed_seconds: float
    usd_per_chip_hour: float | None  # None: no price for this accelerator/region/model
    price_source: str
    chips: int
    cost: float | None
    requests: float | None  # None: vLLM's metrics were never read
    output_tokens: float | None
    torn_down_by: str = ""
    acks: tuple[Ack, ...] = field(default_factory=tuple)

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        if self.cost is None or not self.output_tokens:
            return None
        return self.cost / self.output_tokens * 1_000_000


def price_for(alerting: Alerting, accelerator: str, zone: str) -> prices.PriceEntry | None:
    try:
        return alerting.prices.get(accelerator, zone, alerting.policy.provisioning_model)
    except prices.PriceNotFound:
        return None


def billed_seconds(lease: Lease, now: float) -> float:
    """From ACTIVE to now, capped at the deadline."""
    if not lease.active_at:
        return 0.0
    end = min(now, lease.deadline) if lease.deadline else now
    return max(0.0, end - lease.active_at)


def cost_so_far(alerting: Alerting, accelerator: str, lease: Lease, now: float | None = None) -> float | None:
    price = price_for(alerting, accelerator, lease.zone)
    if price is None:
        return None
    seconds = billed_seconds(lease, now or time.time())
    return prices.cost_for(price, timedelta(seconds=seconds), chips=alerting.policy.chips)


def cost_to_deadline(alerting: Alerting, accelerator: str, lease: Lease, now: float | None = None) -> float | None:
    price = price_for(alerting, accelerator, lease.zone)
    if price is None or not lease.deadline:
        return None
    now = now or time.time()
    start = max(now, lease.active_at or now)
    return prices.cost_for(price, timedelta(seconds=max(0.0, lease.deadline - start)), chips=alerting.policy.chips)


async def build_receipt(alerting: Alerting, accelerator: str, lease: Lease, *, reason: str, by: str = "",
                        now: float | None = None) -> Receipt:
    now = now or time.time()
    try:
        # A bill after the fact: a zone missing from the table is billed at a rate said to be an estimate.
        price, estimated = alerting.prices.estimate(accelerator, lease.zone, alerting.policy.provisioning_model)
    except prices.PriceNotFound:
        price, estimated = None, ""
    seconds = billed_seconds(lease, now)
    usage = await alerting.usage.get(lease.lease_id)
    requests = usage.requests if usage.metrics_at else None
    tokens = usage.output_tokens if usage.metrics_at else None
    live = await read_usage(lease.endpoint, timeout=LIVE_READ_TIMEOUT) if lease.endpoint else None
    if live is not None:
        # Record it so restart offsets apply; totals only grow.
        folded = await alerting.usage.record(lease.lease_id, live, now)
        requests, tokens = folded.requests, folded.output_tokens
    return Receipt(
        lease_id=lease.lease_id, zone=lease.zone, qr_id=lease.qr_id, reason=reason, ended_at=now,
        billed_seconds=seconds,
        usd_per_chip_hour=price.usd_per_chip_hour if price else None,
        price_source=(estimated or f"{'/'.join(price.key)} as of {price.as_of.isoformat()}") if price else "",
        chips=alerting.policy.chips,
        cost=prices.cost_for(price, timedelta(seconds=seconds), chips=alerting.policy.chips) if price else None,
        requests=requests, output_tokens=tokens,
        torn_down_by=by or lease.torn_down_by,
        acks=tuple(await alerting.marks.acks(lease.lease_id)),
    )
