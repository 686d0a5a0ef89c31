"""The reconciler: GCP is the source of truth for resources; Redis is repaired from it.

One pass lists the bot-labelled queued resources (`managed-by=tpubot`, with team, channel
and lease labels) in every configured zone and in every zone a lease names, then:

- a QR whose lease is missing from Redis → the lease is rebuilt (`LeaseStore.restore`) with a
  new status card, its timers, its idle clock and its watcher;
- a known lease whose timers are missing → they are re-created (ids are deterministic, so
  existing ones are untouched);
- a lease whose QR is gone → the lease is released and the channel told;
- a SUSPENDED/FAILED QR no lease owns → deleted (it still holds quota), the channel told;
- a bot-labelled QR with no channel label, or a second QR in a channel that has another
  lease → the admins are alerted once a day (a running TPU is never deleted on a guess);
- a model-key secret (`tpubot-model-key-LEASE`) whose lease is neither in Redis nor named by a
  QR, and older than ORPHAN_KEY_AGE, is deleted: a delete that failed at release left it;
- then every month's spend ledger is rewritten from the receipts stream and the leases now
  known (agent/lease/budget.py), so a lost ledger — or a restored lease's reservation — is back.

Passes are serialized across workers by a lock; the worker's scheduled pass skips when it finds the
lock held (another worker is doing the same work), while `tpubot reconcile` waits for it: an operator
asking for a pass now wants one that starts after whatever made them ask.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from agent.lease import budget, expiry, idle
from agent.lease.lifecycle import lease_state_for, notify, release_lease, resume_job_for
from infra.endpoint_probe import endpoint_url
from infra.jobs import JobOutcome
from infra.state.leases import Lease, LeaseState
from infra.model_keys import ModelKeyError
from infra.tpu import MANAGED_BY, QrState, TpuError

if TYPE_CHECKING:
    from agent.context import AlertingDeps, LeaseDeps, WorkerLeaseDeps
    from infra.tpu import QueuedResourceView

log = logging.getLogger(__name__)

LOCK_SCOPE = ("tpubot", "reconciler")
LOCK_TTL_MS = 5 * 60 * 1000
LOCK_POLL_SECONDS = 0.25  # how often a pass waiting for the lock asks again
ADMIN_ALERT_TTL = 86_400
# Leases the provision or teardown jobs own right now: a missing QR is expected there.
IN_FLIGHT = {LeaseState.PENDING, LeaseState.CREATING, LeaseState.TEARING_DOWN, LeaseState.FAILED}
# A key younger than this is left alone even without a lease: the sweep never races a provision
# job between its claim and its create, whatever the clocks say.
ORPHAN_KEY_AGE = 15 * 60
RESTORED_NOTE = "Restored from Google Cloud by the reconciler after the bot's state was lost."


@dataclass
class ReconcileReport:
    skipped: bool = False
    zones: list[str] = field(default_factory=list)
    zones_failed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)  # lease ids rebuilt from GCP
    timers: list[str] = field(default_factory=list)  # timer/idle job ids re-created
    released: list[str] = field(default_factory=list)  # lease ids whose QR was gone
    deleted: list[str] = field(default_factory=list)  # leftover QR ids deleted
    admin_alerts: list[str] = field(default_factory=list)  # QR ids the admins were told about
    ledgers: list[str] = field(default_factory=list)  # team/month spend ledgers rewritten (issue 21)
    keys_deleted: list[str] = field(default_factory=list)  # lease ids whose orphaned model key was deleted

    def outcome(self) -> JobOutcome:
        if self.skipped:
            return JobOutcome.skipped("another reconcile pass is running")
        parts = [f"{len(self.zones)} zones"]
        for name in ("restored", "timers", "released", "deleted", "keys_deleted", "admin_alerts", "zones_failed",
                     "ledgers"):
            items = getattr(self, name)
            if items:
                parts.append(f"{name.replace('_', ' ')}: {', '.join(items)}")
        return JobOutcome.ok("; ".join(parts))

    def summary(self) -> str:
        return self.outcome().stored()


async def reconcile(svc: "WorkerLeaseDeps", *, now: float | None = None, wait_for_lock: float = 0.0,
                    on_wait: Callable[[], object] | None = None) -> ReconcileReport:
    """One pass; skipped if another holds the lock for longer than `wait_for_lock` seconds
    (`on_wait` is called once if this one has to wait)."""
    token = await _acquire_lock(svc, wait_for_lock, on_wait)
    if token is None:
        return ReconcileReport(skipped=True)
    try:
        report = await _pass(svc, now or time.time())
        report.ledgers = await budget.rebuild(svc)
        return report
    finally:
        await svc.locks.release(*LOCK_SCOPE, token)


async def _acquire_lock(svc: "WorkerLeaseDeps", wait_seconds: float,
                        on_wait: Callable[[], object] | None) -> str | None:
    give_up = time.monotonic() + wait_seconds
    waited = False
    while (token := await svc.locks.acquire(*LOCK_SCOPE, ttl_ms=LOCK_TTL_MS)) is None:
        if time.monotonic() >= give_up:
            return None
        if on_wait is not None and not waited:
            on_wait()
        waited = True
        await asyncio.sleep(LOCK_POLL_SECONDS)
    return token


async def _pass(svc: "WorkerLeaseDeps", now: float) -> ReconcileReport:
    report = ReconcileReport()
    leases = await svc.leases.all()
    report.zones = sorted(set(svc.policy.zones) | {lease.zone for lease in leases if lease.zone})
    seen_leases: set[str] = set()
    for zone in report.zones:
        try:
            qrs = await svc.tpu.aio.list_queued_resources(zone, {"managed-by": MANAGED_BY})
        except TpuError as error:
            log.warning("reconcile: cannot list %s: %s", zone, error)
            report.zones_failed.append(zone)
            continue
        for qr in qrs:
            lease_id = qr.labels.get("tpubot-lease", "")
            seen_leases.add(lease_id)
            await _repair_from_qr(svc, report, qr, now)
    for lease in leases:
        if lease.lease_id in seen_leases or lease.zone in report.zones_failed or lease.state in IN_FLIGHT:
            continue
        await _release_if_gone(svc, report, lease)
    if not report.zones_failed:  # a lease in an unlisted zone would look keyless-and-QR-less
        await _sweep_model_keys(svc, report, seen_leases, now)
    if any((report.restored, report.timers, report.released, report.deleted, report.keys_deleted,
            report.admin_alerts)):
        log.info("reconcile: %s", report.summary())
    return report


async def _repair_from_qr(svc: "WorkerLeaseDeps", report: ReconcileReport, qr: "QueuedResourceView", now: float) -> None:
    labels = qr.labels
    team, channel, lease_id = (labels.get(k, "") for k in ("tpubot-team", "tpubot-channel", "tpubot-lease"))
    if qr.state == QrState.DELETING:
        return
    if not (team and channel and lease_id):
        await _tell_admins(svc, report, qr, f":rotating_light: Queued resource `{qr.qr_id}` in {qr.zone} ({qr.state}) "
                           "is labelled managed-by=tpubot but names no channel, so no channel is paged for it. "
                           "Delete it if nobody needs it.")
        return
    # Slack ids are upper-case; GCP label values are lower-case (infra/tpu.label_value).
    team, channel = team.upper(), channel.upper()
    lease = await svc.leases.get(team, channel)
    if lease is not None and lease.lease_id == lease_id:
        await _ensure_timers(svc, report, lease, now)
        return
    if qr.state.is_terminal:
        await svc.tpu.aio.delete_queued_resource(qr.zone, qr.qr_id)
        report.deleted.append(qr.qr_id)
        await svc.alerting.sink.post_notice(
            channel, f":broom: Deleted leftover queued resource `{qr.qr_id}` in {qr.zone} ({qr.state}): it ran "
                     "no TPU any more but still held quota.")
        return
    if lease is not None:
        await _tell_admins(svc, report, qr, f":rotating_light: Channel <#{channel}> holds lease `{lease.lease_id}`, but "
                           f"queued resource `{qr.qr_id}` in {qr.zone} ({qr.state}) is labelled with its older lease "
                           f"`{lease_id}`. It was left running; delete it if nobody needs it.")
        return
    await _restore(svc, report, qr, team, channel, lease_id, now)


async def _restore(svc: "WorkerLeaseDeps", report: ReconcileReport, qr: "QueuedResourceView", team: str, channel: str,
                   lease_id: str, now: float) -> None:
    try:
        window = await svc.tpu.aio.get_run_window(qr.zone, qr.qr_id)
    except TpuError:
        window = None
    state = lease_state_for(qr.state)
    run_seconds = int(window.max_run_seconds) if window and window.max_run_seconds else \
        int(svc.policy.max_run.total_seconds())
    deadline = 0.0
    if state == LeaseState.ACTIVE:
        # The cloud's termination time when it reports one; otherwise the latest it can be
        # (ACTIVE no later than now), so the bot never expires a TPU early on a guess.
        deadline = window.termination_time if window and window.termination_time else now + run_seconds
    endpoint = ""
    if state == LeaseState.ACTIVE and qr.node_id:
        try:
            node = await svc.tpu.aio.get_node(qr.zone, qr.node_id)
        except TpuError:
            node = None
        if node and node.external_ip:
            endpoint = endpoint_url(node.external_ip, svc.policy.model_port)
    created_at = qr.create_time.timestamp() if qr.create_time else now
    lease = Lease(
        lease_id=lease_id, team=team, channel=channel, holder=qr.labels.get("tpubot-holder", "").upper(),
        zone=qr.zone, qr_id=qr.qr_id, node_id=qr.node_id or "", state=state,
        # The QR exists, so its create was accepted: the lease says so like one the provision job wrote.
        created_at=created_at, queued_at=created_at, deadline=deadline,
        run_seconds=run_seconds, endpoint=endpoint, state_since=now,
        active_at=deadline - run_seconds if deadline else 0.0, detail=RESTORED_NOTE,
    )
    if not await svc.leases.restore(lease):
        return  # another pass (or a /tpu up) wrote this channel's lease meanwhile
    restored = await svc.leases.get_by_id(team, channel, lease_id) or lease
    report.restored.append(lease_id)
    restored = await notify(svc, restored)  # a new status card: the old card's reference was lost
    await _ensure_timers(svc, report, restored, now)
    await resume_job_for(svc, restored)
    await svc.audit.record(actor="tpubot", action="reconcile", team=team, channel=channel, outcome="restored",
                           detail=qr.qr_id)


async def _ensure_timers(svc: "AlertingDeps", report: ReconcileReport, lease: Lease, now: float) -> None:
    if not lease.state.holds_tpu:
        return
    if lease.deadline:
        report.timers += await expiry.schedule_timers(svc, lease, now=now)
    if await idle.schedule_check(svc, lease, after=now):
        report.timers.append(f"idle:{lease.lease_id}")


async def _release_if_gone(svc: "WorkerLeaseDeps", report: ReconcileReport, lease: Lease) -> None:
    try:  # the list may predate a QR created since; ask for this one before releasing
        qr = await svc.tpu.aio.get_queued_resource(lease.zone, lease.qr_id)
    except TpuError:
        return
    if qr is not None:
        return
    current = await svc.leases.get_by_id(lease.team, lease.channel, lease.lease_id)
    if current is None or current.state in IN_FLIGHT:
        return
    if await release_lease(svc, current, reason="The reconciler found this TPU's queued resource gone from "
                                                "Google Cloud; the lease is released"):
        report.released.append(lease.lease_id)
        await svc.audit.record(actor="tpubot", action="reconcile", team=lease.team, channel=lease.channel,
                               outcome="released", detail=lease.qr_id)


async def _sweep_model_keys(svc: "LeaseDeps", report: ReconcileReport, seen_leases: set[str], now: float) -> None:
    try:
        keyed = await svc.model_keys.keyed_leases()
    except ModelKeyError as error:
        log.warning("reconcile: model keys not swept: %s", error.message)
        return
    # Read after the listing: a lease claimed meanwhile is known here, so its new key is kept.
    known = seen_leases | {lease.lease_id for lease in await svc.leases.all()}
    for secret in keyed:
        if secret.lease_id in known or secret.created is None or now - secret.created.timestamp() < ORPHAN_KEY_AGE:
            continue
        try:
            await svc.model_keys.destroy(secret.lease_id)
        except ModelKeyError as error:
            log.warning("reconcile: orphaned model key of %s not deleted: %s", secret.lease_id, error.message)
            continue
        report.keys_deleted.append(secret.lease_id)
        await svc.audit.record(actor="tpubot", action="reconcile", team="", channel="", outcome="model key deleted",
                               detail=secret.lease_id)


async def _tell_admins(svc: "AlertingDeps", report: ReconcileReport, qr: "QueuedResourceView", text: str) -> None:
    if not await svc.alerting.marks.claim(qr.qr_id, f"admin-{qr.zone}", ttl_seconds=ADMIN_ALERT_TTL):
        return
    report.admin_alerts.append(qr.qr_id)
    await svc.alerting.sink.notify_admins(text)
