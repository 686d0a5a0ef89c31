"""Each process gets the services it uses (issue 30): Services is set whole in every process,
the worker's extra parts are WorkerServices', and a process without Slack gets named stand-ins."""

from __future__ import annotations

import asyncio
import dataclasses

from slack_sdk.web.async_client import AsyncWebClient

from agent.actions.run_context import RunContext
from agent.context import NoGroups, Services, SilentObserver, WorkerServices
from bot.settings import Settings
from bot.wiring import build_services, build_worker_services
from handlers.directory import SlackGroupDirectory
from handlers.notifier import SlackLeaseObserver
from infra.state.leases import Lease, LeaseState
from infra.tpu import TpuService

# No field may be None: one agent run's logs are its RunContext's (agent/actions/run_context.py), not
# the services'. A backend a process or a sandbox lacks is a null object (NoCloudLogging, NoModelKeys,
# NoLocalFiles, as NoGroups below).
MAY_BE_NONE: set[str] = set()


def optional_fields(cls: type) -> set[str]:
    # agent/context.py postpones its annotations (some name TYPE_CHECKING-only classes): read them as written.
    return {field.name for field in dataclasses.fields(cls)
            if "None" in str(field.type).replace(" ", "").replace("'", "").replace('"', "").split("|")}


def test_services_leave_none_only_where_a_setting_or_a_run_decides():
    assert optional_fields(Services) == MAY_BE_NONE
    extra = {field.name for field in dataclasses.fields(WorkerServices)} - {
        field.name for field in dataclasses.fields(Services)}
    assert extra == {"tpu", "startup_script"}
    assert optional_fields(WorkerServices) == MAY_BE_NONE  # the worker's own parts are never None
    required = {field.name for field in dataclasses.fields(WorkerServices)
                if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING}
    assert required >= extra | {"alerting", "model", "spend", "scoreboard", "preflight", "observer", "directory"}


def test_the_web_gets_no_tpu_client_and_the_worker_its_own_script(redis_url):
    settings = Settings(_env_file=None)

    async def build() -> tuple[Services, WorkerServices]:
        client = AsyncWebClient(token="xoxb-test", base_url="http://127.0.0.1:9/api/")
        web, redis, pool = await build_services(settings, redis_url=redis_url, slack_client=client)
        worker, wredis, wpool = await build_worker_services(settings, redis_url=redis_url, slack_client=client)
        for closing in (pool, redis, wpool, wredis):
            await closing.aclose()
        return web, worker

    web, worker = asyncio.run(build())
    assert type(web) is Services and not hasattr(web, "tpu")
    assert isinstance(worker.tpu, TpuService)
    lease = Lease(lease_id="L-123", team="T", channel="C", holder="U", zone="us-west4-a", qr_id="q", node_id="n",
                  state=LeaseState.ACTIVE)
    script = worker.startup_script(lease)
    assert script.startswith("#!") and "L-123" in script and "placeholder" not in script
    assert isinstance(web.observer, SlackLeaseObserver) and isinstance(web.directory, SlackGroupDirectory)


def test_a_process_without_slack_changes_leases_without_cards_and_admits_no_group(redis_url):
    async def run() -> None:
        services, redis, pool = await build_services(Settings(_env_file=None), redis_url=redis_url)
        try:
            assert isinstance(services.observer, SilentObserver) and isinstance(services.directory, NoGroups)
            lease = Lease(lease_id="L-1", team="T", channel="C", holder="U", zone="us-west4-a", qr_id="q", node_id="n",
                  state=LeaseState.ACTIVE)
            assert await services.observer.lease_changed(lease) is lease  # no card, the lease unchanged
            assert await services.directory.members("S0SRE") == frozenset()
        finally:
            await pool.aclose()
            await redis.aclose()

    asyncio.run(run())


def test_a_sandbox_without_logging_or_secret_manager_emulators_gets_null_backends_that_say_so(redis_url):
    from datetime import datetime, timedelta, timezone

    from agent.actions import run_action
    from agent.actions.log_actions import read_alert_logs
    from agent.context import Actor
    from infra.cloud_logging import NoCloudLogging
    from infra.local_files import NoLocalFiles
    from infra.model_keys import NoModelKeys

    async def run() -> None:
        services, redis, pool = await build_services(Settings(_env_file=None), redis_url=redis_url)
        try:
            assert isinstance(services.cloud_logs, NoCloudLogging) and isinstance(services.model_keys, NoModelKeys)
            assert isinstance(services.local_files, NoLocalFiles)
            await services.model_keys.create("L-1")  # endpoints run without a key: nothing to make
            assert await services.model_keys.key("L-1") is None and await services.model_keys.keyed_leases() == []
            actor = Actor(user_id="U", team="T", channel="C")
            now = datetime.now(timezone.utc)
            logs = await read_alert_logs(services, RunContext(actor, services.redactor), resource_type="tpu_worker",
                                         resource_labels={"node_id": "n"}, window=(now - timedelta(hours=1), now))
            assert logs.lines == () and logs.problem == "Cloud Logging is not configured for this bot (set GCP_PROJECT)."
            refused = await run_action("summarize_logs", services, actor, {"path": "app.log"})
            assert not refused.ok and "does not read files from its own disk" in refused.text
        finally:
            await pool.aclose()
            await redis.aclose()

    asyncio.run(run())


def test_the_model_and_mcp_are_offered_only_the_tools_this_deployment_wires(redis_url):
    from agent.llm.prompt import model_tools
    from bot.mcp_server import mcp_tools
    from infra.cloud_logging import CloudLoggingConfig

    async def build() -> Services:
        services, redis, pool = await build_services(Settings(_env_file=None), redis_url=redis_url)
        await pool.aclose()
        await redis.aclose()
        return services

    services = asyncio.run(build())  # a sandbox without a Logging emulator
    offered = {tool["function"]["name"] for tool in model_tools(services)}
    assert "query_cloud_logs" not in offered and {"summarize_logs", "status"} <= offered
    assert "query_cloud_logs" not in {tool.name for tool in mcp_tools(services)}
    wired = dataclasses.replace(services, cloud_logs=CloudLoggingConfig(project="p", api_endpoint="http://127.0.0.1:9"))
    assert "query_cloud_logs" in {tool["function"]["name"] for tool in model_tools(wired)}
    assert "query_cloud_logs" in {tool.name for tool in mcp_tools(wired)}
