"""What an action runs with: who asked (Actor), the deployment's policy, and the services it may use.

Actor, Policy and ModelConfig are re-exported here as the action context; they live in their
own modules (agent/actor.py, agent/policy.py, agent/model_config.py), which import nothing of ours.
The ports that other layers implement (LeaseObserver, LeaseHook, AlertSink, LogMaterial) are
declared here too, so the root never imports the rooms that use it.

The composition root (bot/wiring.py) builds these from Settings; nothing here reads the
environment, so tests and every process wire the same objects explicitly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from agent.actor import Actor
from agent.model_config import ModelConfig
from agent.policy import AlertPolicy, Policy
from agent.redact import Redactor
from infra.jobs import JobQueue
from infra.metrics import Metrics
from infra.prices import PriceTable
from infra.runbooks.library import RunbookLibrary
from infra.state.alerts import AlertMarks
from infra.state.audit import AuditLog
from infra.state.bench_results import BenchResults
from infra.state.dedupe import Dedupe
from infra.state.leases import Lease, LeaseStore
from infra.state.locks import ChannelLocks
from infra.state.oncall import OnCallStore
from infra.state.usage import UsageStore

if TYPE_CHECKING:
    from agent.access import AccessPolicy, GroupDirectory
    from infra.cloud_logging import CloudLoggingConfig
    from infra.local_files import LocalFiles
    from infra.state.feedback import FeedbackStore
    from infra.state.followups import FollowedThreads
    from infra.state.incident_memory import IncidentMemory
    from infra.state.membership import ChannelMembership
    from infra.state.proposals import ProposalStore
    from infra.model_keys import ModelKeys
    from infra.preflight import PreflightGate
    from infra.scoreboard import ZoneScoreboard
    from infra.tpu import TpuService
    from infra.state.spend import SpendLedger


def _open_access() -> "AccessPolicy":
    from agent.access import AccessPolicy

    return AccessPolicy()


class ChannelUnreachable(Exception):
    """The bot cannot post in the lease's channel (removed from it, or never in it); the holder
    has been told by DM. Raised by LeaseObserver.lease_changed."""

    def __init__(self, channel: str, reason: str) -> None:
        super().__init__(f"cannot post in {channel}: {reason}")
        self.channel, self.reason = channel, reason


class LeaseObserver(Protocol):
    """Tells people about a lease (the Slack status card); implemented in handlers/."""

    async def lease_changed(self, lease: Lease) -> Lease:
        """Post or refresh the lease's status card; returns the lease with its card reference.
        Raises ChannelUnreachable when the channel cannot be posted to."""

    async def lease_released(self, lease: Lease, *, reason: str, by: str = "") -> None:
        """Mark the card released and post the receipt in its thread."""

    async def tell_holder(self, lease: Lease, text: str) -> None:
        """A direct message to the lease's holder (when the channel cannot be posted to)."""


class LeaseHook(Protocol):
    """Work that follows a lease's milestones (model boot, expiry timers…), one module per concern."""

    async def on_active(self, svc: "Services", lease: Lease) -> None:
        """The QR just became ACTIVE (called once per lease)."""

    async def on_released(self, svc: "Services", lease: Lease, reason: str) -> None:
        """The lease was released (teardown, expiry, failure, or the QR vanished)."""


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


class LogMaterial(Protocol):
    """The logs a mention brought (agent/llm/material.py's MentionInput), as summarize_logs reads them."""

    @property
    def has_logs(self) -> bool: ...

    def log_lines(self) -> Iterable[str]: ...  # read again from the start on each call

    def log_line_count(self) -> int: ...

    def line_map(self) -> str: ...


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
    alerting: Alerting | None = None  # expiry timers, on-call alerts, idle clock, receipts (issue 4)
    hooks: list[LeaseHook] = field(default_factory=list)
    metrics: Metrics = field(default_factory=Metrics)
    access: "AccessPolicy" = field(default_factory=lambda: _open_access())
    directory: "GroupDirectory | None" = None  # Slack user groups, for group-based access rules
    startup_script: Callable[[Lease], str] = field(default=lambda lease: "#!/bin/bash\necho tpubot placeholder\n")
    # The agent (issue 5): model settings, Cloud Logging, pending confirm-card proposals.
    model: ModelConfig | None = None
    cloud_logs: "CloudLoggingConfig | None" = None
    proposals: "ProposalStore | None" = None
    # Per agent run only (a `dataclasses.replace` copy): the mention's logs, for summarize_logs.
    material: LogMaterial | None = None
    # Zone scoreboard and the cached `tpubot doctor` verdict (issue 3).
    scoreboard: "ZoneScoreboard | None" = None
    preflight: "PreflightGate | None" = None
    # Log files on this machine, for summarize_logs' `path`: only `tpubot mcp` sets it (issue 19);
    # a Slack process never reads its own disk for a user.
    local_files: "LocalFiles | None" = None
    # Budgets and the spend ledger (issue 21): None leaves /tpu up unchecked.
    spend: "SpendLedger | None" = None
    # The per-lease API key of the model endpoint (issue 15); None: endpoints without a key.
    model_keys: "ModelKeys | None" = None
    # Whether the bot is in each channel, as Slack last said (issue 16); None: not tracked.
    membership: "ChannelMembership | None" = None
    # Threads a plain reply in is answered without a mention (issue 32); None: follow-ups are off.
    followups: "FollowedThreads | None" = None
    # 👍/👎 on answers, with the model and input digest (issue 32); None: no buttons.
    feedback: "FeedbackStore | None" = None
    # Ended incidents by their top log templates, cited when they come back (issue 32).
    memory: "IncidentMemory | None" = None
    # What must never reach a model prompt or Slack: the secret patterns plus the deployment's own
    # secret values (bot/wiring.py); an agent run's copy also knows every live lease's model key
    # (agent/actions/secret_values.py), since a lease key has no shape a pattern could find.
    redactor: Redactor = field(default_factory=Redactor)
    # Runbooks the agent searches and cites (issue 31): the built-in ones, plus RUNBOOKS_DIR/URLS.
    runbooks: RunbookLibrary = field(default_factory=RunbookLibrary.from_settings)

    def worker_tpu(self) -> "TpuService":
        """The TPU client, for the code that runs only in the worker (bot/wiring.py gives it one)."""
        if self.tpu is None:
            raise RuntimeError("this process has no TPU client: GCP calls run in the worker")
        return self.tpu

    def wired_alerting(self) -> Alerting:
        """The alerting parts, for the code that runs only where they are wired (its callers check)."""
        if self.alerting is None:
            raise RuntimeError("alerting is not wired in this process")
        return self.alerting


__all__ = ["Actor", "Alert", "AlertPolicy", "AlertSink", "Alerting", "ChannelUnreachable", "LeaseHook", "LeaseObserver",
           "LogMaterial", "ModelConfig", "Policy", "Services"]
