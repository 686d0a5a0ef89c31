"""Alerts about a lease: what they say, who they page, and posting each one exactly once.

Timers (agent/lease/expiry.py), the idle clock (agent/lease/idle.py) and the reconciler decide *when*;
this module decides *what* and makes sure that however many workers reach the same decision,
one alert is posted: a Redis marker per (lease, alert) is claimed before posting and given
back if the post fails, so a retry can post it.

The shared parts (Alert, AlertSink, Alerting, AlertPolicy) live in the agent root
(agent/context.py, agent/policy.py); the Slack side implements `AlertSink` in handlers/.
"""

from __future__ import annotations

import re
import time

from agent.context import Alert, Alerting
from infra.state.leases import Lease

# Acknowledgement kinds (one per clock): acknowledging a deadline warning silences the later
# ones; acknowledging an idle warning keeps the TPU until its deadline.
ACK_DEADLINE = "deadline"
ACK_IDLE = "idle"
EXPIRY = "expiry"

MARK_TTL_AFTER_DEADLINE = 2 * 86_400  # markers outlive the lease, so a late retry still sees them


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


def span(seconds: float) -> str:
    """A duration as alerts say it: `1h05m`, `12 min`, `40 s`."""
    seconds = max(0, int(round(seconds)))
    if seconds >= 3600:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60} min"
    return f"{seconds} s"
