"""What an action runs with: who asked (Actor), the deployment's policy, and the services it may use
(Services, and one read-only view of it per feature: ChannelDeps … IncidentDeps).

Actor, Policy and ModelConfig are re-exported here as the action context; they live in their
own modules (agent/actor.py, agent/policy.py, agent/model_config.py), which import nothing of ours.
The ports that other layers implement (LeaseObserver, LeaseHook, AlertSink) are
declared here too, so the root never imports the rooms that use it.

The composition root (bot/wiring.py) builds these from Settings; nothing here reads the
environment, so tests and every process wire the same objects explicitly.
"""

from __future__ import annotations

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
from infra.state.alerts import AlertMarks, BenchResults, OnCallStore
from infra.state.audit import AuditLog
from infra.state.dedupe import Dedupe
from infra.state.leases import Lease, LeaseStore
from infra.state.locks import ChannelLocks
from infra.state.usage import UsageStore

if TYPE_CHECKING:
    from agent.access import AccessPolicy, GroupDirectory
    from infra.cloud_logging import CloudLoggingConfig, NoCloudLogging
    from infra.local_files import LocalFiles, NoLocalFiles
    from infra.state.feedback import FeedbackStore, ProposalStore
    from infra.state.conversations import ChannelMembership, FollowedThreads
    from infra.state.incident_memory import IncidentMemory
    from infra.model_keys import ModelKeys, NoModelKeys
    from infra.preflight import PreflightGate
    from infra.scoreboard import ZoneScoreboard
    from infra.tpu import TpuService
    from infra.state.spend import SpendLedger


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

    async def on_active(self, svc: WorkerLeaseDeps, lease: Lease) -> None:
        """The QR just became ACTIVE (called once per lease, in the worker)."""

    async def on_released(self, svc: LeaseDeps, lease: Lease, reason: str) -> None:
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


class NoAlerts:
    """The alert sink of a process without a Slack client: it has no channel to post in, so an
    alert is claimed (once, as everywhere) and goes nowhere."""

    async def post_alert(self, alert: Alert) -> None:
        return None

    async def post_notice(self, channel: str, text: str, *, thread_ts: str = "") -> None:
        return None

    async def notify_admins(self, text: str) -> None:
        return None


@dataclass
class Alerting:
    """What the alerting modules share; built once per process in bot/wiring.py."""

    policy: AlertPolicy
    marks: AlertMarks
    oncall: OnCallStore
    usage: UsageStore
    bench: BenchResults
    prices: PriceTable
    sink: AlertSink = field(default_factory=NoAlerts)
    admins: tuple[str, ...] = field(default_factory=tuple)
    on_posted: Callable[[Alert], None] | None = None  # e.g. the alerts counter in /metrics


class SilentObserver:
    """The observer of a process without a Slack client (`tpubot spend`, `tpubot capacity`,
    `tpubot eval`): it has no channel to post in, so a lease's card is left as it is."""

    async def lease_changed(self, lease: Lease) -> Lease:
        return lease

    async def lease_released(self, lease: Lease, *, reason: str, by: str = "") -> None:
        return None

    async def tell_holder(self, lease: Lease, text: str) -> None:
        return None


class NoGroups:
    """The group directory of a process without a Slack client: no user is in any group, so
    only the access rules that name users and channels can admit anyone."""

    async def members(self, group_id: str) -> frozenset[str]:
        return frozenset()

    async def channel_name(self, channel_id: str) -> str | None:
        return None  # shown by id


@dataclass(kw_only=True)
class Services:
    """What every process that acts for a channel uses (web, worker, `tpubot mcp`, the CLI
    commands), built once in bot/wiring.py. Each field is set in every process; what only the
    worker has is in WorkerServices. A backend this deployment lacks is a null object (NoGroups,
    SilentObserver, NoAlerts, NoCloudLogging, NoModelKeys, NoLocalFiles), never None."""

    leases: LeaseStore
    locks: ChannelLocks
    audit: AuditLog
    dedupe: Dedupe
    jobs: JobQueue
    policy: Policy
    metrics: Metrics
    access: "AccessPolicy"
    directory: "GroupDirectory"  # Slack user groups, for group-based access rules (NoGroups without Slack)
    observer: LeaseObserver  # the status card (SilentObserver without Slack)
    alerting: Alerting  # expiry timers, on-call alerts, idle clock, receipts (issue 4)
    hooks: list[LeaseHook]
    # The agent (issue 5): model settings and pending confirm-card proposals.
    model: ModelConfig
    proposals: "ProposalStore"
    # Zone scoreboard and the cached `tpubot doctor` verdict (issue 3).
    scoreboard: "ZoneScoreboard"
    preflight: "PreflightGate"
    # Budgets and the spend ledger (issue 21): with no budget set, /tpu up goes unchecked.
    spend: "SpendLedger"
    # Whether the bot is in each channel, as Slack last said (issue 16).
    membership: "ChannelMembership"
    # Threads a plain reply in is answered without a mention (issue 32).
    followups: "FollowedThreads"
    # 👍/👎 on answers, with the model and input digest (issue 32).
    feedback: "FeedbackStore"
    # Ended incidents by their top log templates, cited when they come back (issue 32).
    memory: "IncidentMemory"
    # What must never reach a model prompt or Slack: the secret patterns plus the deployment's own
    # secret values (bot/wiring.py); an agent run's copy also knows every live lease's model key
    # (agent/actions/model_endpoint.py), since a lease key has no shape a pattern could find.
    redactor: Redactor
    # Runbooks the agent searches and cites (issue 31): the built-in ones, plus RUNBOOKS_DIR/URLS.
    runbooks: RunbookLibrary
    # Cloud Logging (none in a sandbox without a Logging emulator).
    cloud_logs: "CloudLoggingConfig | NoCloudLogging"
    # The per-lease API key of the model endpoint (issue 15; none in a sandbox without a Secret
    # Manager emulator: endpoints without a key).
    model_keys: "ModelKeys | NoModelKeys"
    # Log files on this machine, for summarize_logs' `path`: only `tpubot mcp` reads them (issue 19);
    # a Slack process never reads its own disk for a user.
    local_files: "LocalFiles | NoLocalFiles" = field(default_factory=lambda: _no_local_files())


def _no_local_files() -> "NoLocalFiles":
    from infra.local_files import NoLocalFiles

    return NoLocalFiles()


@dataclass(kw_only=True)
class WorkerServices(Services):
    """The worker's services: all of Services, plus what only the worker touches — the TPU API
    (handlers never call GCP) and the startup script a new TPU VM boots with."""

    tpu: "TpuService"  # blocking; the event loop awaits `tpu.aio` (infra/tpu.py's AsyncTpuService)
    startup_script: Callable[[Lease], str]  # one lease's script (bot/wiring.py); no secret in it


# --- one view of Services per feature -----------------------------------------------------------
# A function takes the view of the feature it serves, so reading another feature's backend (or a
# misspelt one) is a type error. Services satisfies every view structurally (tests/test_layers.py
# checks each member is one of its fields, of the same type); members are read-only, so no view
# can swap a backend.


class ChannelDeps(Protocol):
    """A channel's lease, its card, its jobs, the audit log and who may act: the lease actions and requests."""

    @property
    def leases(self) -> LeaseStore: ...
    @property
    def policy(self) -> Policy: ...
    @property
    def jobs(self) -> JobQueue: ...
    @property
    def audit(self) -> AuditLog: ...
    @property
    def observer(self) -> LeaseObserver: ...
    @property
    def access(self) -> "AccessPolicy": ...
    @property
    def directory(self) -> "GroupDirectory": ...


class AlertingDeps(ChannelDeps, Protocol):
    """Expiry timers, the idle clock and on-call alerts (agent/lease/expiry, idle, oncall)."""

    @property
    def alerting(self) -> Alerting: ...


class SpendDeps(AlertingDeps, Protocol):
    """Budgets and the spend ledger (agent/lease/budget.py, the spend actions); prices are alerting's."""

    @property
    def spend(self) -> "SpendLedger": ...


class ZoneDeps(Protocol):
    """Choosing a zone: the scoreboard and the `tpubot doctor` verdict (zone_search, /tpu zones, /tpu up)."""

    @property
    def policy(self) -> Policy: ...
    @property
    def scoreboard(self) -> "ZoneScoreboard": ...
    @property
    def preflight(self) -> "PreflightGate": ...


class LeaseDeps(SpendDeps, ZoneDeps, Protocol):
    """A lease's whole life in any process: claim, lock, release and what its hooks do on release."""

    @property
    def locks(self) -> ChannelLocks: ...
    @property
    def hooks(self) -> list[LeaseHook]: ...
    @property
    def model_keys(self) -> "ModelKeys | NoModelKeys": ...
    @property
    def membership(self) -> "ChannelMembership": ...


class WorkerLeaseDeps(LeaseDeps, Protocol):
    """The worker's jobs on a lease (provisioning, watching, model boot, teardown, expiry, reconcile)."""

    @property
    def tpu(self) -> "TpuService": ...
    @property
    def startup_script(self) -> Callable[[Lease], str]: ...


class AgentDeps(ChannelDeps, Protocol):
    """The mention agent (agent/llm) and the actions that read logs, runbooks and the model for it."""

    @property
    def metrics(self) -> Metrics: ...
    @property
    def model(self) -> ModelConfig: ...
    @property
    def proposals(self) -> "ProposalStore": ...
    @property
    def redactor(self) -> Redactor: ...
    @property
    def runbooks(self) -> RunbookLibrary: ...
    @property
    def cloud_logs(self) -> "CloudLoggingConfig | NoCloudLogging": ...
    @property
    def model_keys(self) -> "ModelKeys | NoModelKeys": ...
    @property
    def local_files(self) -> "LocalFiles | NoLocalFiles": ...


class ThreadDeps(Protocol):
    """A thread the bot answered in: follow-ups, 👍/👎 and corrections, incident memory, channel membership."""

    @property
    def followups(self) -> "FollowedThreads": ...
    @property
    def feedback(self) -> "FeedbackStore": ...
    @property
    def memory(self) -> "IncidentMemory": ...
    @property
    def membership(self) -> "ChannelMembership": ...
    @property
    def redactor(self) -> Redactor: ...
    @property
    def audit(self) -> AuditLog: ...


class MentionDeps(ThreadDeps, Protocol):
    """Taking a mention or a follow-up in (handlers/mentions): first-delivery markers and the answer queue."""

    @property
    def dedupe(self) -> Dedupe: ...
    @property
    def jobs(self) -> JobQueue: ...


class IncidentDeps(ThreadDeps, Protocol):
    """An alert's thread (handlers/incident_job): it pages the channel's on-call, else the lease holder."""

    @property
    def leases(self) -> LeaseStore: ...
    @property
    def alerting(self) -> Alerting: ...


__all__ = ["Actor", "AgentDeps", "Alert", "AlertPolicy", "AlertSink", "Alerting", "AlertingDeps",
           "ChannelDeps", "ChannelUnreachable", "IncidentDeps", "LeaseDeps", "LeaseHook", "LeaseObserver",
           "MentionDeps", "ModelConfig", "NoAlerts", "NoGroups", "Policy", "Services", "SilentObserver",
           "SpendDeps", "ThreadDeps", "WorkerLeaseDeps", "WorkerServices", "ZoneDeps"]
