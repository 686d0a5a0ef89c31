"""After ACTIVE: wait for vLLM on the TPU VM, measure and check it — BOOTING MODEL → READY (DEGRADED, FAILED).

`ModelBootHook.on_active` enqueues the first boot job. Each run looks once (like the watcher:
no job holds a worker for the minutes a model takes to load) and re-schedules itself with a
deterministic id (`boot:{lease}:{n}`), so a retried or duplicated run is a no-op:

1. endpoint from the node: its external IP (or, with ENDPOINT_ADDRESS=internal, its VPC IP) →
   `http://IP:{MODEL_PORT}/v1` (never hard-coded);
2. `GET /v1/models` until vLLM answers — progress on the card — bounded by `model_boot_timeout`;
   meanwhile the VM's own account of its boot (guest attributes: phase, since when, why a step
   before vLLM is retrying, warm/cold/off compile cache and why) goes on the card. A VM that gave up
   before vLLM (phase `failed`: a secret it may not read, an image pull refused) and a vLLM that
   crashed twice at start-up FAIL the lease at once, with the VM's error line and the fix from the
   one table (infra/vllm_startup_errors.py), not at the timeout; a VM that has said nothing
   `model_boot_silence` after ACTIVE is named on the card as not reporting;
3. one real streamed chat completion (TTFT, TPOT, tokens/s by vLLM's benchmark definitions);
4. two correctness checks (infra/model_correctness.py): a known answer, a parsed tool call;
5. READY with the endpoint and the figures; DEGRADED (the same, plus what failed and the fix) when a
   correctness check failed; or FAILED with the reason and the fix. A FAILED or DEGRADED model
   keeps its TPU (and its lease) so it can be debugged; `/tpu down` releases it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Unpack

from agent.context import AlertingDeps, ChannelDeps, LeaseDeps, WorkerLeaseDeps
from agent.lease import idle
from agent.lease.lifecycle import WatchJob, change_lease
from agent.policy import Policy
from infra import boot_phases
from infra.boot_phases import BootReport
from infra.jobs import JobOutcome, JobSpec
from infra.endpoint_probe import endpoint_url, list_models, probe_chat
from infra.model_correctness import CheckFailure, check_known_answer, check_tool_call
from infra.state.leases import Lease, LeaseChanges, LeaseState
from infra.model_keys import ModelKeyError
from infra.tpu import NodeView, QrState, TpuError
from infra.vllm_metrics import read_usage
from infra.vllm_startup_errors import crash_loop_explanation, failed_boot_explanation

log = logging.getLogger(__name__)

BOOT_JOB = JobSpec("boot_model", WatchJob)
BOOTABLE_STATES = (LeaseState.ACTIVE, LeaseState.BOOTING_MODEL)
CRASH_LOOP_RESTARTS = 2  # the container exited this often without serving: it will not start by itself


def boot_job_id(lease_id: str, seq: int) -> str:
    return f"boot:{lease_id}:{seq}"


class ModelBootHook:
    """Starts the boot/health job when the TPU becomes ACTIVE."""

    async def on_active(self, svc: ChannelDeps, lease: Lease) -> None:
        await svc.jobs.enqueue(BOOT_JOB, WatchJob(team=lease.team, channel=lease.channel, lease_id=lease.lease_id,
                                                  seq=0),
                               job_id=boot_job_id(lease.lease_id, 0))

    async def on_released(self, svc: LeaseDeps, lease: Lease, reason: str) -> None:
        # A pending boot job sees the lease gone and stops by itself; the endpoint's key goes with the lease.
        try:
            await svc.model_keys.destroy(lease.lease_id)
        except ModelKeyError as error:  # the reconciler's sweep deletes it later
            log.warning("model key of lease %s not deleted: %s", lease.lease_id, error.message)


async def boot_job(svc: WorkerLeaseDeps, job: WatchJob) -> JobOutcome:
    lease = await svc.leases.get_by_id(job.team, job.channel, job.lease_id)
    if lease is None or lease.state not in BOOTABLE_STATES:
        return JobOutcome.stopped("lease changed")
    node = await svc.tpu.aio.get_node(lease.zone, lease.node_id)
    if node is None or node.state != "READY":
        # A suspended or deleted TPU has no node (or no address): not a boot failure. The watcher, or the
        # deadline timer when the watch was lost, reads the queued resource and says what happened.
        qr = await svc.tpu.aio.get_queued_resource(lease.zone, lease.qr_id)
        if qr is None or qr.state != QrState.ACTIVE:
            return JobOutcome.stopped(f"the TPU is no longer running ({qr.state if qr else 'deleted'})")
        if node is not None:  # ACTIVE, its node still starting or restarting: look again
            await _poll_again(svc, job)
            return JobOutcome.ok(f"waiting for the node ({node.state})")
    endpoint = _endpoint(svc, node)
    if not endpoint:
        if svc.policy.endpoint_address == "internal":
            return await _fail(svc, lease, "The TPU node reports no internal IP, so the bot cannot reach vLLM on it.",
                               "check the node's network (`gcloud compute tpus tpu-vm describe "
                               f"{lease.node_id} --zone {lease.zone}`), then `/tpu down` and `/tpu up` again.")
        return await _fail(svc, lease, "The TPU node reports no external IP, so the bot cannot reach vLLM on it.",
                           "keep external IPs allowed for TPU VMs in this project (org policy "
                           "constraints/compute.vmExternalIpAccess), or run the bot inside the VPC with "
                           "ENDPOINT_ADDRESS=internal; then `/tpu down` and `/tpu up` again.")
    policy = svc.policy
    since_active = time.time() - (lease.active_at or time.time())
    api_key = await lease_api_key(svc, lease)
    check = await list_models(endpoint, api_key=api_key)
    if check.ok:
        if policy.model_name not in check.models:
            served = ", ".join(check.models) or "no model"
            return await _fail(svc, lease, f"vLLM at {endpoint} serves {served}, not {policy.model_name}.",
                               f"set MODEL_NAME to the model the startup script serves ({served}), or fix the "
                               "startup script (`tpubot render-startup-script`).", endpoint=endpoint)
        await _note_boot(svc, lease, await _boot_report(svc, lease))
        return await _measure(svc, lease, endpoint, api_key)
    report = await _boot_report(svc, lease)
    if report is not None and report.phase == boot_phases.FAILED:
        reason, fix = failed_boot_explanation(report.last_error, project=svc.policy.project, node=lease.node_id,
                                              zone=lease.zone)
        return await _fail(svc, lease, reason, fix, endpoint=endpoint, extra=_boot_changes(lease, report))
    if report is not None and is_crash_loop(report):
        reason, fix = crash_loop_explanation(report.last_error, report.restarts, node=lease.node_id, zone=lease.zone)
        return await _fail(svc, lease, reason, fix, endpoint=endpoint, extra=_boot_changes(lease, report))
    if since_active > policy.model_boot_timeout.total_seconds():
        serving = report is not None and report.phase == boot_phases.SERVING
        said = (f" The VM's last phase: {report.phase}." if report is not None and report.phase else
                " The VM published no boot phase at all.")
        cause = (f"the VM says vLLM serves, so the bot cannot reach it: a firewall rule must admit the bot to "
                 f"tcp:{policy.model_port} on the node (`tpubot doctor`)" if serving else
                 "vLLM is still loading or compiling (a first compile can take most of an hour: raise "
                 "MODEL_BOOT_TIMEOUT), or the startup script never ran")
        return await _fail(
            svc, lease,
            f"vLLM did not answer at {endpoint} within {_minutes(policy.model_boot_timeout.total_seconds())} of the "
            f"TPU becoming ACTIVE (last error: {check.error}).{said}",
            f"read the VM's startup log (`gcloud compute tpus tpu-vm ssh {lease.node_id} --zone {lease.zone} -- "
            f"'sudo journalctl -u google-startup-scripts; sudo docker logs tpubot-vllm'`); {cause}.",
            endpoint=endpoint, extra=_boot_changes(lease, report) if report is not None else None)
    progress = (f"Waiting for vLLM at {endpoint}: {_minutes(since_active)} since ACTIVE, gives up after "
                f"{_minutes(policy.model_boot_timeout.total_seconds())} (now: {check.error}). "
                + _boot_story(report, since_active, policy))
    booting: LeaseChanges = {"state": LeaseState.BOOTING_MODEL, "endpoint": endpoint, "detail": progress,
                             **(_boot_changes(lease, report) if report is not None else {})}
    if not await _write(svc, lease, **booting):
        return JobOutcome.stopped("lease changed")
    await _poll_again(svc, job)
    return JobOutcome.ok(f"waiting for vLLM ({check.error})")


async def _poll_again(svc: ChannelDeps, job: WatchJob) -> None:
    await svc.jobs.enqueue(BOOT_JOB, dataclasses.replace(job, seq=job.seq + 1),
                           job_id=boot_job_id(job.lease_id, job.seq + 1), defer_by=svc.policy.boot_poll_interval)


def _boot_story(report: BootReport | None, since_active: float, policy: Policy) -> str:
    """What the VM is doing, for the progress note; or that it has said nothing for too long."""
    if (report is None or report.phase is None) and since_active > policy.model_boot_silence.total_seconds():
        return (f"The TPU VM has published no boot phase in {_minutes(since_active)} since ACTIVE: its startup script "
                "may not have run, or guest attributes are off (the org policy "
                "constraints/compute.disableGuestAttributesAccess), so this card cannot follow the boot. vLLM may "
                "still come up; the VM's startup log says what happened "
                "(`sudo journalctl -u google-startup-scripts` on the VM).")
    return f"The VM reads its secrets, pulls the vLLM image and loads {policy.model_name}."


async def _measure(svc: AlertingDeps, lease: Lease, endpoint: str, api_key: str | None) -> JobOutcome:
    probe = await probe_chat(endpoint, svc.policy.model_name, api_key=api_key)
    if not probe.ok:
        return await _fail(svc, lease, f"vLLM at {endpoint} is up, but a test chat completion failed: {probe.error}.",
                           "read `sudo docker logs tpubot-vllm` on the VM; the health check uses "
                           "/v1/chat/completions (an -it model answers raw /v1/completions with empty text).",
                           endpoint=endpoint)
    failures = await _correctness(endpoint, svc.policy.model_name, api_key)
    # Before READY lets anyone else in: what vLLM has counted so far is these probes, not usage.
    if (probes := await read_usage(endpoint)) is not None:
        await svc.alerting.usage.exclude_boot_probes(lease.lease_id, probes)
    state = LeaseState.DEGRADED if failures else LeaseState.READY
    ok = await _write(
        svc, lease, state=state, endpoint=endpoint, detail=degraded_detail(failures),
        ttft_ms=round(probe.ttft_ms, 2), tpot_ms=round(probe.tpot_ms, 3), tokens_per_s=round(probe.tokens_per_s, 1),
        model_info=probe.served_by, image=svc.policy.vllm_image,
    )
    figures = f"ttft {probe.ttft_ms:.1f} ms, tpot {probe.tpot_ms:.2f} ms"
    await svc.audit.record(actor="tpubot", action="model_ready", team=lease.team, channel=lease.channel,
                           outcome=(state.value.lower() if ok else "lease changed"),
                           detail=f"{endpoint} {figures}" + "".join(f"; {f.what}" for f in failures))
    if not ok:
        return JobOutcome.stopped("lease changed")
    await idle.take_first_reading(svc, lease)
    return JobOutcome.ok(f"degraded: {'; '.join(f.what for f in failures)}" if failures else f"ready: {figures}")


async def _correctness(endpoint: str, model: str, api_key: str | None) -> list[CheckFailure]:
    """READY means correct: a known answer, and a tool call that comes back parsed."""
    results = await asyncio.gather(check_known_answer(endpoint, model, api_key=api_key),
                                   check_tool_call(endpoint, model, api_key=api_key))
    return [failure for failure in results if failure is not None]


def degraded_detail(failures: list[CheckFailure]) -> str:
    """The card's note for DEGRADED: what failed, then ` Fix: ` and the fixes (cards split on it)."""
    if not failures:
        return ""
    fixes = list(dict.fromkeys(f.fix for f in failures))
    return ("; ".join(f.what[:1].upper() + f.what[1:] for f in failures) + ". Fix: " + "; ".join(fixes) +
            ". Mentions here are answered without this model until it is fixed; the TPU keeps running (and "
            "billing) and its clocks run as for READY: `/tpu down` releases it.")


def degraded_reason(lease: Lease) -> str:
    """What a DEGRADED lease's checks found, without the fix: for one-line texts."""
    return lease.detail.partition(" Fix: ")[0]


async def lease_api_key(svc: LeaseDeps, lease: Lease) -> str | None:
    """The key vLLM on this lease's VM expects (None: no key store, or the lease has no key)."""
    try:
        return await svc.model_keys.key(lease.lease_id)
    except ModelKeyError as error:
        log.warning("model key of lease %s unreadable: %s", lease.lease_id, error.message)
        return None


def is_crash_loop(report: BootReport) -> bool:
    """Crashed twice and not past loading the model since. Not `phase == crashed` alone: Docker
    restarts a crashed container within a second, so a crash loop spends most of its time loading
    the weights again; one that got as far as compiling (a transient crash, recovered) is left to go on."""
    return report.restarts >= CRASH_LOOP_RESTARTS and report.phase not in (boot_phases.COMPILING, boot_phases.SERVING)


async def _boot_report(svc: WorkerLeaseDeps, lease: Lease) -> BootReport | None:
    """The VM's guest attributes; None when they cannot be read now (the boot goes on without them)."""
    try:
        return await svc.tpu.aio.get_boot_report(lease.zone, lease.node_id)
    except TpuError as error:
        log.warning("boot phase of lease %s unreadable: %s", lease.lease_id, error)
        return None


def _boot_changes(lease: Lease, report: BootReport) -> LeaseChanges:
    """The lease fields for what the VM reported; a phase without a readable start counts from now."""
    changes: LeaseChanges = {}
    retry = report.last_error if report.phase in boot_phases.BEFORE_VLLM else ""
    if retry != lease.boot_retry:
        changes["boot_retry"] = retry
    if report.cache_note and report.cache_note != lease.boot_cache_note:
        changes["boot_cache_note"] = report.cache_note
    if report.phase and report.phase != lease.boot_phase:
        changes["boot_phase"] = report.phase
        changes["boot_phase_since"] = report.since.timestamp() if report.since else time.time()
    elif report.phase and report.since and report.since.timestamp() != lease.boot_phase_since:
        changes["boot_phase_since"] = report.since.timestamp()  # the same phase again (a restart)
    if report.cache and report.cache != lease.boot_cache:
        changes["boot_cache"] = report.cache
    return changes


async def _note_boot(svc: ChannelDeps, lease: Lease, report: BootReport | None) -> None:
    """Keep the last boot report on the lease without a card update (the READY write that follows shows it)."""
    changes: LeaseChanges = _boot_changes(lease, report) if report is not None else {}
    if changes:
        await svc.leases.update(lease, **changes)


def _endpoint(svc: ChannelDeps, node: NodeView | None) -> str:
    address = None if node is None else (
        node.internal_ip if svc.policy.endpoint_address == "internal" else node.external_ip)
    return endpoint_url(address, svc.policy.model_port) if address else ""


async def _fail(svc: ChannelDeps, lease: Lease, reason: str, fix: str, *, endpoint: str = "",
                extra: LeaseChanges | None = None) -> JobOutcome:
    detail = f"{reason} Fix: {fix} The TPU is still running (and billing): `/tpu down` releases it."
    changes: LeaseChanges = {"state": LeaseState.FAILED, "detail": detail, **(extra or {})}
    if endpoint:
        changes["endpoint"] = endpoint
    ok = await _write(svc, lease, **changes)
    await svc.audit.record(actor="tpubot", action="model_boot", team=lease.team, channel=lease.channel,
                           outcome="failed", detail=reason)
    return JobOutcome.failed(reason) if ok else JobOutcome.stopped("lease changed")


async def _write(svc: ChannelDeps, lease: Lease, **changes: Unpack[LeaseChanges]) -> bool:
    # Re-read first: a teardown confirmed meanwhile must not be overwritten by a model state.
    fresh = await svc.leases.get_by_id(lease.team, lease.channel, lease.lease_id)
    if fresh is None or fresh.state not in BOOTABLE_STATES:
        return False
    return await change_lease(svc, fresh, **changes) is not None


def _minutes(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds < 3600 else f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
