"""Alerts about a lease: what they say, who they page, and posting each one exactly once.

Timers (agent/lease/expiry.py), the idle clock (agent/lease/idle.py) and the reconciler decide *when*;
this module decides *what* and makes sure that however many workers reach the same decision,
one alert is posted: a Redis marker per (lease, alert) is claimed before posting and given
back if the post fails, so a retry can post it.

Nothing here imports agent.context (it is imported by it); the Slack side implements
`AlertSink` in handlers/.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable, Protocol

from infra.prices import PriceTable
from infra.state.alerts import AlertMarks
from infra.state.bench_results import BenchResults
from infra.state.leases import Lease
from infra.state.oncall import OnCallStore
from infra.state.usage import UsageStore

# Acknowledgement kinds (one per clock): acknowledging a deadline warning silences the later
# ones; acknowledging an idle warning keeps the TPU until its deadline.
ACK_DEADLINE = "deadline"
ACK_IDLE = "idle"
EXPIRY = "expiry"

MARK_TTL_AFTER_DEADLINE = 2 * 86_400  # markers outlive the lease, so a late retry still sees them


@dataclass(frozen=True)
class AlertPolicy:
    lead_times: tuple[timedelta, ...] = (timedelta(minutes=30), timedelta(minutes=5))
    late_after: timedelta = timedelta(minutes=1)  # an alert this long after its time is marked late
    idle_teardown: timedelta | None = None  # None: the idle clock never tears down
    idle_check_interval: timedelta = timedelta(minutes=1)
    provisioning_model: str = "flex-start"  # which price applies to the bot's TPUs
    chips: int = 1

    @property
    def idle_warning_lead(self) -> timedelta:
        """The idle warning comes this long before idle teardown (the shortest deadline lead)."""
        lead = min(self.lead_times) if self.lead_times else timedelta(minutes=5)
        if self.idle_teardown is not None:
            lead = min(lead, self.idle_teardown / 2)
        return lead


@dataclass(frozen=True)
class Alert:
    """One message to the channel. `ack_kind` set: it carries Tear down / Acknowledge buttons."""

    lease: Lease
    marker: str  # the (lease, marker) pair is posted once
    title: str
    body: str
    mentions: tuple[str, ...] = ()
    ack_kind: str | None = None
    late_by: float = 0.0  # seconds after its time; > 0 only when over the policy's late_after
    cost_so_far: float | None = None


class AlertSink(Protocol):
    """Posts alerts and notices (implemented in handlers/ for Slack)."""

    async def post_alert(self, alert: Alert) -> None: ...

    async def post_notice(self, channel: str, text: str, *, thread_ts: str = "") -> None: ...

    async def notify_admins(self, text: str) -> None: ...


@dataclass
class Alerting:
    """What the alerting modules share; built once per process in bot/wiring.py."""

    policy: AlertPolicy
    marks: AlertMarks
    oncall: OnCallStore
    usage: UsageStore
    bench: BenchResults
    prices: PriceTable
    sink: AlertSink | None = None
    admins: tuple[str, ...] = field(default_factory=tuple)
    on_posted: Callable[[Alert], None] | None = None  # e.g. the alerts counter in /metrics


async def mentions_for(alerting: Alerting, lease: Lease) -> tuple[str, ...]:
    """The channel's on-call list; by default the lease holder."""
    stored = await alerting.oncall.get(lease.team, lease.channel)
    if stored:
        return tuple(stored)
    return (f"<@{lease.holder}>",) if lease.holder else ()


def late_by(alerting: Alerting, due: float, now: float) -> float:
    """Seconds late, or 0 when within the policy's tolerance."""
    late = now - due
    return late if late > alerting.policy.late_after.total_seconds() else 0.0


async def post_once(alerting: Alerting, alert: Alert) -> bool:
    """Post unless another worker already did; True if this call posted."""
    ttl = max(0.0, alert.lease.deadline - time.time()) + MARK_TTL_AFTER_DEADLINE
    if not await alerting.marks.claim(alert.lease.lease_id, alert.marker, ttl_seconds=int(ttl)):
        return False
    if alerting.sink is None:
        return True
    try:
        await alerting.sink.post_alert(alert)
    except BaseException:
        await alerting.marks.unclaim(alert.lease.lease_id, alert.marker)
        raise
    if alerting.on_posted is not None:
        alerting.on_posted(alert)
    return True


def alert_kind(alert: Alert) -> str:
    """The marker without its per-lease numbers (idle-1764460000 → idle): a bounded label set."""
    return re.sub(r"[-:]?\d+[a-z]?$", "", alert.marker) or alert.marker
