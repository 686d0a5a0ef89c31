"""The unit tier (issue 30): actions as every process wires them (bot/wiring.py's build_services)
against a real Redis and the real job queue, with QueuedJobs in the worker's place.

What is asserted here is what an action decides and what it leaves for the worker; the Slack
requests, the worker running those jobs and the emulated cloud are the tests' that go through the
bolt app (tests/test_slack_lifecycle.py and tests/test_budgets.py end to end, tests/test_access.py
in-process).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agent.actions import ActionStatus, run_action
from agent.actions.lease_actions import DM_CHANNEL, Requested
from agent.actions.registry import Declined
from agent.actions.spend_actions import SPEND_CHART_JOB
from agent.context import Actor, Services
from agent.lease.lifecycle import PROVISION_JOB, TEARDOWN_JOB, ProvisionJob
from bot.settings import Settings
from bot.wiring import build_services
from infra.state.leases import LeaseState
from queued_jobs import QueuedJobs

ALICE = Actor("U0ALICE", "T1", "C1")
BOB = Actor("U0BOB", "T1", "C1")


@pytest.fixture
def unit(redis_url: str) -> Callable[..., Any]:
    """Run `body(services, queued)` on services built from `settings` (the embedded defaults)."""

    def run(body: Callable[[Services, QueuedJobs], Awaitable[None]], **settings: Any) -> None:
        async def main() -> None:
            services, redis, pool = await build_services(Settings(_env_file=None, **settings), redis_url=redis_url)
            try:
                await body(services, QueuedJobs(pool))
            finally:
                await pool.aclose()
                await redis.aclose()

        asyncio.run(main())

    return run


def test_up_holds_the_channel_and_queues_one_provision_job(unit):
    async def body(services: Services, queued: QueuedJobs) -> None:
        first = await run_action("provision", services, ALICE, {"hours": 2})
        assert first.ok and isinstance(first.payload, Requested) and first.payload.lease.holder == ALICE.user_id
        again = await run_action("provision", services, BOB, {})
        assert not again.ok and "already held by <@U0ALICE>" in again.text
        jobs = await queued.of(PROVISION_JOB)
        assert [job.args for job in jobs] == [ProvisionJob(team="T1", channel="C1", lease_id=first.payload.lease.lease_id)]
        lease = await services.leases.get("T1", "C1")
        assert lease is not None and lease.state == LeaseState.PENDING and lease.run_seconds == 7200

    unit(body)


def test_up_in_a_direct_message_or_a_channel_the_bot_left_queues_nothing(unit):
    async def body(services: Services, queued: QueuedJobs) -> None:
        in_dm = await run_action("provision", services, Actor("U0ALICE", "T1", "D1"), {})
        assert not in_dm.ok and in_dm.text == DM_CHANNEL and in_dm.payload is Declined.NOT_IN_CHANNEL
        await services.membership.record("T1", "C2", member=False)
        left = await run_action("provision", services, Actor("U0ALICE", "T1", "C2"), {})
        assert not left.ok and "/invite @tpubot" in left.text and left.payload is Declined.NOT_IN_CHANNEL
        assert await queued.names() == []
        assert await services.leases.get("T1", "D1") is None and await services.leases.get("T1", "C2") is None

    unit(body)


def test_up_over_the_budget_is_refused_with_the_worst_case_and_queues_nothing(unit):
    async def body(services: Services, queued: QueuedJobs) -> None:
        await services.spend.set_limit("T1", 1.0, channel="C1")
        refused = await run_action("provision", services, ALICE, {"hours": 8})
        assert not refused.ok and refused.payload is Declined.BUDGET and "$1.00" in refused.text
        assert await queued.names() == [] and await services.leases.get("T1", "C1") is None

    unit(body)


def test_a_write_refused_by_the_access_rules_is_audited_and_queues_nothing(unit):
    async def body(services: Services, queued: QueuedJobs) -> None:
        denied = await run_action("provision", services, BOB, {})
        assert not denied.ok and denied.status is ActionStatus.DENIED
        allowed = await run_action("provision", services, ALICE, {})
        assert allowed.ok
        entries = await services.audit.recent(10)
        assert any(e.actor == "U0BOB" and e.action == "provision" and e.outcome == "denied" for e in entries)
        assert len(await queued.of(PROVISION_JOB)) == 1

    unit(body, write_users=["U0ALICE"])


def test_down_queues_the_teardown_only_after_a_confirm(unit):
    async def body(services: Services, queued: QueuedJobs) -> None:
        up = await run_action("provision", services, ALICE, {})
        assert up.ok and isinstance(up.payload, Requested)
        asked = await run_action("teardown", services, ALICE, {})
        assert asked.status is ActionStatus.NEEDS_CONFIRMATION and await queued.of(TEARDOWN_JOB) == []
        lease = await services.leases.get("T1", "C1")
        assert lease is not None
        from agent.actions.lease_actions import confirm_teardown

        await confirm_teardown(services, ALICE, lease.lease_id)
        jobs = await queued.of(TEARDOWN_JOB)
        assert [job.job_id for job in jobs] == [f"teardown:{lease.lease_id}"]

    unit(body)


def test_a_double_clicked_spend_chart_queues_one_chart(unit):
    async def body(services: Services, queued: QueuedJobs) -> None:
        first = await run_action("spend_chart", services, ALICE, {})
        second = await run_action("spend_chart", services, ALICE, {})
        assert first.ok and not second.ok and "just queued" in second.text
        jobs = await queued.of(SPEND_CHART_JOB)
        assert len(jobs) == 1 and jobs[0].args.channel == "C1" and jobs[0].args.user_id == "U0ALICE"

    unit(body)
