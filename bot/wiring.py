"""The composition root: turns Settings into the clients and services every process uses.

Nothing below bot/ reads Settings; this module hands each layer exactly the values it needs.
Async clients are built inside the event loop that uses them (redis.asyncio binds to a loop).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import aiohttp
from arq.connections import ArqRedis
from redis.asyncio import BlockingConnectionPool, Redis
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from agent.access import AccessPolicy, ActionKind, ClassRule, GroupDirectory
from agent.context import LeaseObserver, NoGroups, Policy, Services, SilentObserver, WorkerServices
from agent.redact import Redactor
from bot import alert_wiring
from bot.settings import Settings
from handlers.directory import SlackGroupDirectory
from handlers.notifier import SlackLeaseObserver
from infra.metrics import Metrics
from infra.runbooks.library import RunbookLibrary
from infra.jobs import QUEUE_NAME, JobQueue
from infra.state.audit import AuditLog
from infra.state.dedupe import Dedupe
from infra.state.leases import LeaseStore
from infra.state.locks import ChannelLocks
from infra.state.feedback import FeedbackStore, ProposalStore
from infra.state.conversations import ChannelMembership, FollowedThreads
from infra.state.incident_memory import IncidentMemory


def access_policy_from(settings: Settings) -> AccessPolicy:
    def rule(users: list[str], groups: list[str], channels: list[str]) -> ClassRule:
        return ClassRule(users=frozenset(users), groups=frozenset(groups), channels=frozenset(channels))

    return AccessPolicy(
        admins=frozenset(settings.admins),
        admin_groups=frozenset(settings.admin_groups),
        rules={
            ActionKind.READ: rule(settings.read_users, settings.read_groups, settings.read_channels),
            ActionKind.WRITE: rule(settings.write_users, settings.write_groups, settings.write_channels),
            ActionKind.ADMIN: rule([], [], settings.admin_channels),
        },
    )


def model_config_from(settings: Settings):
    from agent.model_config import ModelConfig
    from infra.vllm_flags import image_limit

    return ModelConfig(base_url=settings.gemma_base_url, model=settings.model_name,
                       api_key=settings.gemma_api_key.get_secret_value() or ModelConfig.api_key,
                       max_steps=settings.agent_max_steps, stream=settings.agent_stream,
                       enabled=settings.agent_use_model, off_by=settings.model_off_by,
                       max_images=image_limit(settings.vllm_limit_mm_per_prompt))


def redactor_from(settings: Settings) -> Redactor:
    """Redaction that also knows the deployment's own secret values (every SecretStr setting: the
    Slack bot and app tokens, the signing secret), which have no shape a pattern could find."""
    return Redactor(settings.secret_values())


def cloud_logging_config_from(settings: Settings):
    from infra.cloud_logging import CloudLoggingConfig, NoCloudLogging

    target = settings.mode.target
    endpoint = target.api_endpoint(settings.logging_api_endpoint)
    if endpoint is None:
        return NoCloudLogging()
    return CloudLoggingConfig(project=settings.project, api_endpoint=endpoint or None, anonymous=target.anonymous)


def policy_from(settings: Settings) -> Policy:
    return Policy(
        zones=tuple(settings.tpu_zones),
        default_zone=settings.tpu_zone,
        accelerator_type=settings.tpu_accelerator_type,
        max_run=settings.max_run_duration,
        shortest_run=settings.min_run_duration,
        poll_interval=settings.poll_interval,
        active_poll_interval=max(settings.poll_interval, min(settings.poll_interval * 6, timedelta(minutes=1))),
        valid_until=settings.valid_until_duration,
        search_budget=min(timedelta(minutes=2), settings.job_timeout / 2),
        model_port=settings.model_port,
        model_name=settings.model_name,
        model_boot_timeout=settings.model_boot_timeout,
        endpoint_address=settings.endpoint_address,
        vllm_image=settings.vllm_image,
        boot_poll_interval=min(timedelta(seconds=15), settings.poll_interval * 1.5),
        model_boot_silence=settings.model_boot_silence,
        project=settings.project,
    )


def vllm_config_from(settings: Settings):
    from infra.vllm_flags import VllmConfig

    return VllmConfig(
        model=settings.model_name, port=settings.model_port, image=settings.vllm_image,
        max_model_len=settings.vllm_max_model_len, max_num_batched_tokens=settings.vllm_max_num_batched_tokens,
        max_num_seqs=settings.vllm_max_num_seqs,
        limit_mm_per_prompt=settings.vllm_limit_mm_per_prompt, tensor_parallel_size=settings.tensor_parallel_size,
        revision=settings.model_revision, gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
    )


EXAMPLE_LEASE_ID = "LEASE"  # what `tpubot render-startup-script` shows where a lease id goes


def startup_script_config_from(settings: Settings, lease_id: str = EXAMPLE_LEASE_ID):
    from infra.model_keys import model_key_secret_version
    from infra.startup_script import StartupScriptConfig

    from infra.startup_script import SECRET_MANAGER_URL, STORAGE_URL

    # The VM reaches Google where the bot does: one setting per API, Google's when unset.
    return StartupScriptConfig(project=settings.project, hf_token_secret=settings.hf_token_secret,
                               vllm=vllm_config_from(settings),
                               secret_manager_url=settings.secretmanager_api_endpoint or SECRET_MANAGER_URL,
                               storage_url=settings.storage_api_endpoint or STORAGE_URL,
                               api_key_secret=model_key_secret_version(settings.project, lease_id),
                               accelerator_type=settings.tpu_accelerator_type,
                               xla_cache_bucket=settings.xla_cache_bucket)


def startup_script_from(settings: Settings):
    """`WorkerServices.startup_script`: the script for one lease (None: the example); no secret in it.

    Leases differ only in the name of the API-key secret the VM reads at boot.
    """
    from infra.startup_script import render_startup_script

    return lambda lease: render_startup_script(
        startup_script_config_from(settings, lease.lease_id if lease is not None else EXAMPLE_LEASE_ID))


def model_keys_from(settings: Settings):
    """The per-lease model API keys in Secret Manager (none in a sandbox without its emulator)."""
    from infra.model_keys import ModelKeys, NoModelKeys

    if settings.mode.target.api_endpoint(settings.secretmanager_api_endpoint) is None:
        return NoModelKeys()
    return ModelKeys(settings.project, credentials=settings.mode.credentials(),
                     api_endpoint=settings.secretmanager_api_endpoint, reader=node_account_from(settings))


def node_account_from(settings: Settings):
    """The account the TPU VMs run as (TPU_SERVICE_ACCOUNT, else the project's default Compute Engine one)."""
    from infra.node_account import NodeAccount

    return NodeAccount(settings.project, configured=settings.tpu_service_account,
                       credentials=settings.mode.credentials(),
                       resourcemanager_endpoint=settings.resourcemanager_api_endpoint,
                       secretmanager_endpoint=settings.secretmanager_api_endpoint)


def preflight_config_from(settings: Settings):
    from infra.preflight import PreflightConfig

    return PreflightConfig(
        project=settings.project, zone=settings.tpu_zone, accelerator=settings.tpu_accelerator_type,
        network=settings.network, subnetwork=settings.subnetwork, hf_token_secret=settings.hf_token_secret,
        mode=settings.mode, tpu_endpoint=settings.tpu_api_endpoint,
        compute_endpoint=settings.compute_api_endpoint, quotas_endpoint=settings.quotas_api_endpoint,
        secretmanager_endpoint=settings.secretmanager_api_endpoint,
        model_port=settings.model_port, network_tag=settings.model_network_tag,
        model_source_ranges=tuple(settings.model_source_ranges
                                  or settings.mode.target.default_model_source_ranges),
        endpoint_address=settings.endpoint_address, vllm_image=settings.vllm_image,
        xla_cache_bucket=settings.xla_cache_bucket, storage_endpoint=settings.storage_api_endpoint,
        resourcemanager_endpoint=settings.resourcemanager_api_endpoint, tpu_service_account=settings.tpu_service_account,
        iam_endpoint=settings.iam_api_endpoint,
    )


def tpu_config_from(settings: Settings):
    from infra.tpu import TpuConfig

    return TpuConfig(
        project=settings.project,
        accelerator_type=settings.tpu_accelerator_type,
        runtime_version=settings.tpu_runtime_version,
        network=settings.network,
        subnetwork=settings.subnetwork,
        labels=dict(settings.tpu_labels),
        max_run_duration=settings.max_run_duration,
        valid_until_duration=settings.valid_until_duration,
        api_endpoint=settings.tpu_api_endpoint,
        network_tags=(settings.model_network_tag,),
        external_ips=settings.endpoint_address == "external",
        service_account=settings.tpu_service_account,
    )


def tpu_service_from(settings: Settings, metrics: Metrics | None = None):
    from infra.tpu import TpuService

    on_error = (lambda error: metrics.gcp_errors.labels(error.kind.value).inc()) if metrics else None
    return TpuService(tpu_config_from(settings), credentials=settings.mode.credentials(),
                      lro_poll_interval=settings.mode.target.lro_poll_interval, on_error=on_error)


SLACK_TIMEOUT_SECONDS = 10


def slack_http_session() -> aiohttp.ClientSession:
    """One keep-alive HTTP session for a long-lived process's Slack calls; call inside its loop.

    Without one, slack_sdk opens a session, a TCP connection and a TLS handshake for every
    Web API call and closes them after; the web process's per-mention status line then costs
    more than the request that caused it.
    """
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SLACK_TIMEOUT_SECONDS),
                                 connector=aiohttp.TCPConnector(limit=32, keepalive_timeout=60))


def slack_client_from(settings: Settings, *, session: aiohttp.ClientSession | None = None) -> AsyncWebClient:
    """`session`: from slack_http_session(), owned (and closed) by the caller; None = one per call."""
    kwargs: dict[str, Any] = {}
    if settings.slack_api_url:
        kwargs["base_url"] = settings.slack_api_url
    return AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value() or None,
        timeout=SLACK_TIMEOUT_SECONDS,
        session=session,
        retry_handlers=[AsyncConnectionErrorRetryHandler(max_retry_count=1), AsyncRateLimitErrorRetryHandler(max_retry_count=2)],
        **kwargs,
    )


# A bounded pool: a burst of Slack requests reuses a few connections instead of opening one
# per request (each new connection costs a handshake, and a burst of them can overflow the
# server's accept queue into 1 s SYN retries).
REDIS_POOL_SIZE = 32
# How long one Redis command may wait for its answer. The web process waits longer
# (WEB_REDIS_TIMEOUT_SECONDS): its acks do not wait on Redis past their budget
# (handlers/late_answers.py), so a command caught in a failover pause finishes whole instead of
# timing out with its write perhaps applied later.
REDIS_TIMEOUT_SECONDS = 2.0
WEB_REDIS_TIMEOUT_SECONDS = 10.0


def _pool(redis_url: str, socket_timeout: float) -> BlockingConnectionPool:
    return BlockingConnectionPool.from_url(redis_url, max_connections=REDIS_POOL_SIZE, timeout=2,
                                           socket_timeout=socket_timeout, socket_connect_timeout=2,
                                           health_check_interval=30)


def redis_client(redis_url: str, *, socket_timeout: float = REDIS_TIMEOUT_SECONDS) -> Redis:
    return Redis(connection_pool=_pool(redis_url, socket_timeout))


def job_pool(redis_url: str, *, socket_timeout: float = REDIS_TIMEOUT_SECONDS) -> ArqRedis:
    """arq's Redis client for the job queue. No connection at construction: a web process starts
    (and answers "state store unavailable") while Redis is down, and recovers when it returns."""
    return ArqRedis(_pool(redis_url, socket_timeout), default_queue_name=QUEUE_NAME)


async def arq_pool(redis_url: str, *, socket_timeout: float = REDIS_TIMEOUT_SECONDS) -> ArqRedis:
    return job_pool(redis_url, socket_timeout=socket_timeout)


async def build_services(
    settings: Settings, *, redis_url: str, slack_client: AsyncWebClient | None = None,
    redis_timeout: float = REDIS_TIMEOUT_SECONDS, lock_owner: str | None = None,
) -> tuple[Services, Redis, ArqRedis]:
    """What the web process, `tpubot mcp` and the CLI commands run with. `slack_client` None (a
    CLI command without Slack): leases change without touching their cards, group rules admit nobody.

    `lock_owner`: a worker's id, so a lock it dies holding is released by the heartbeat's
    sweep (bot/orphaned_jobs.py); other processes take plain tokens, left to the lock's TTL."""
    redis = redis_client(redis_url, socket_timeout=redis_timeout)
    pool = await arq_pool(redis_url, socket_timeout=redis_timeout)
    return _services(settings, redis, pool, slack_client, lock_owner), redis, pool


async def build_worker_services(
    settings: Settings, *, redis_url: str, slack_client: AsyncWebClient | None,
    redis_timeout: float = REDIS_TIMEOUT_SECONDS, lock_owner: str | None = None,
) -> tuple[WorkerServices, Redis, ArqRedis]:
    """What the worker (and `tpubot reconcile`, which runs the worker's pass) runs with: Services
    plus the TPU client and the startup script."""
    svc, redis, pool = await build_services(settings, redis_url=redis_url, slack_client=slack_client,
                                                 redis_timeout=redis_timeout, lock_owner=lock_owner)
    worker = WorkerServices(**{field.name: getattr(svc, field.name) for field in dataclasses.fields(svc)},
                            tpu=tpu_service_from(settings, svc.metrics),
                            startup_script=startup_script_from(settings))
    return worker, redis, pool


def _services(settings: Settings, redis: Redis, pool: ArqRedis, slack_client: AsyncWebClient | None,
              lock_owner: str | None) -> Services:
    from agent.lease.model_boot import ModelBootHook
    from agent.lease.zone_search import ZoneOutcomeHook
    from infra.preflight import PreflightGate, PreflightStore
    from infra.scoreboard import ZoneScoreboard

    leases = LeaseStore(redis)
    metrics = Metrics()
    alerting = alert_wiring.alerting_from(settings, redis, slack_client, metrics)
    membership = ChannelMembership(redis)
    observer: LeaseObserver = SilentObserver()
    directory: GroupDirectory = NoGroups()
    if slack_client is not None:
        observer = SlackLeaseObserver(slack_client, leases, receipt=alert_wiring.receipt_for(alerting, settings),
                                      membership=membership)
        directory = SlackGroupDirectory(slack_client, redis)
    return Services(
        metrics=metrics,
        leases=leases,
        locks=ChannelLocks(redis, ttl_ms=int(settings.lock_ttl.total_seconds() * 1000), owner=lock_owner),
        audit=AuditLog(redis),
        dedupe=Dedupe(redis),
        jobs=JobQueue(pool, queue_name=QUEUE_NAME),
        policy=policy_from(settings),
        observer=observer,
        alerting=alerting,
        hooks=[*alert_wiring.alert_hooks(), ZoneOutcomeHook(), ModelBootHook()],
        access=access_policy_from(settings),
        directory=directory,
        model=model_config_from(settings),
        cloud_logs=cloud_logging_config_from(settings),
        proposals=ProposalStore(redis),
        scoreboard=ZoneScoreboard(redis, settings.tpu_accelerator_type),
        preflight=PreflightGate(PreflightStore(redis), preflight_config_from(settings).fingerprint()),
        spend=spend_ledger_from(settings, redis),
        model_keys=model_keys_from(settings),
        membership=membership,
        followups=FollowedThreads(redis, int(settings.followup_max_age.total_seconds())),
        feedback=FeedbackStore(redis),
        memory=IncidentMemory(redis),
        redactor=redactor_from(settings),
        runbooks=RunbookLibrary.from_settings(settings.runbooks_dir, settings.runbooks_urls),
    )


def spend_ledger_from(settings: Settings, redis: Redis):
    """Budgets and the spend ledger (issue 21): the settings' monthly defaults, admin-set overrides in Redis."""
    from infra.state.spend import SpendLedger

    return SpendLedger(redis, default_workspace=settings.budget_workspace_monthly,
                       default_channel=settings.budget_channel_monthly)
