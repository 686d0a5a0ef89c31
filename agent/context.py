"""What an action runs with: who asked, the deployment's policy, and the services it may use.

The composition root (bot/wiring.py) builds these from Settings; nothing here reads the
environment, so tests and every process wire the same objects explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Callable, Protocol

from infra.jobs import JobQueue
from infra.metrics import Metrics
from infra.state.audit import AuditLog
from infra.state.dedupe import Dedupe
from infra.state.leases import Lease, LeaseStore
from infra.state.locks import ChannelLocks

if TYPE_CHECKING:
    from agent.lease.alerts import Alerting
    from agent.access import AccessPolicy, GroupDirectory
    from agent.llm.material import MentionInput
    from agent.llm.model_endpoint import ModelConfig
    from infra.cloud_logging import CloudLoggingConfig
    from infra.state.proposals import ProposalStore
    from infra.preflight import PreflightGate
    from infra.scoreboard import ZoneScoreboard
    from infra.tpu import TpuService


def _open_access() -> "AccessPolicy":
    from agent.access import AccessPolicy

    return AccessPolicy()


@dataclass(frozen=True)
class Actor:
    """The person (or MCP identity) on whose behalf an action runs."""

    user_id: str
    team: str
    channel: str


@dataclass(frozen=True)
class Policy:
    zones: tuple[str, ...] = ("us-west4-a",)
    default_zone: str = "us-west4-a"
    accelerator_type: str = "v5litepod-1"
    max_run: timedelta = timedelta(hours=4)
    longest_run: timedelta = timedelta(days=7)
    poll_interval: timedelta = timedelta(seconds=10)
    active_poll_interval: timedelta = timedelta(seconds=60)
    teardown_wait: timedelta = timedelta(minutes=5)
    # Zone search and model boot (issue 3).
    valid_until: timedelta = timedelta(hours=4)  # how long a flex-start request may queue
    search_budget: timedelta = timedelta(minutes=2)  # one provision job's share of a zone search
    model_port: int = 8000
    model_name: str = "google/gemma-4-E2B-it"
    model_boot_timeout: timedelta = timedelta(minutes=45)
    boot_poll_interval: timedelta = timedelta(seconds=15)


class LeaseObserver(Protocol):
    """Tells people about a lease (the Slack status card); implemented in handlers/."""

    async def lease_changed(self, lease: Lease) -> Lease:
        """Post or refresh the lease's status card; returns the lease with its card reference."""

    async def lease_released(self, lease: Lease, *, reason: str, by: str = "") -> None:
        """Mark the card released and post the receipt in its thread."""


class LeaseHook(Protocol):
    """Work that follows a lease's milestones (model boot, expiry timers…), one module per concern."""

    async def on_active(self, svc: "Services", lease: Lease) -> None:
        """The QR just became ACTIVE (called once per lease)."""

    async def on_released(self, svc: "Services", lease: Lease, reason: str) -> None:
        """The lease was released (teardown, expiry, failure, or the QR vanished)."""


@dataclass
class Services:
    leases: LeaseStore
    locks: ChannelLocks
    audit: AuditLog
    dedupe: Dedupe
    jobs: JobQueue
    policy: Policy
    observer: LeaseObserver | None = None
    tpu: "TpuService | None" = None  # worker only: handlers never call GCP
    alerting: "Alerting | None" = None  # expiry timers, on-call alerts, idle clock, receipts (issue 4)
    hooks: list[LeaseHook] = field(default_factory=list)
    metrics: Metrics = field(default_factory=Metrics)
    access: "AccessPolicy" = field(default_factory=lambda: _open_access())
    directory: "GroupDirectory | None" = None  # Slack user groups, for group-based access rules
    startup_script: Callable[[Lease], str] = field(default=lambda lease: "#!/bin/bash\necho tpubot placeholder\n")
    # The agent (issue 5): model settings, Cloud Logging, pending confirm-card proposals.
    model: "ModelConfig | None" = None
    cloud_logs: "CloudLoggingConfig | None" = None
    proposals: "ProposalStore | None" = None
    # Per agent run only (a `dataclasses.replace` copy): the mention's logs, for summarize_logs.
    material: "MentionInput | None" = None
    # Zone scoreboard and the cached `tpubot doctor` verdict (issue 3).
    scoreboard: "ZoneScoreboard | None" = None
    preflight: "PreflightGate | None" = None
