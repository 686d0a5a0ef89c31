"""The workspace budget under a burst: 40 concurrent `/tpu up` in 20 channels through two separate
`tpubot serve` processes (and a `tpubot worker`) claim no more than the budget holds.

Each 4 h run's worst case is $2.40 ($0.60 per chip-hour, us-west4); the workspace may spend $10
a month, so exactly four runs fit ($9.60) and a fifth would overrun it. The check and the claim
are one Lua script, so no interleaving of the two processes' requests lets a fifth through.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from redis.asyncio import Redis

from infra.sandbox.slack_requests import SlackRequests
from infra.state.spend import SpendLedger, month_of
from test_replicas import replicas  # noqa: F401  (the two-web-process fixture)

pytestmark = pytest.mark.e2e  # runs our own processes or a LocalStack (conftest end_to_end_work_is_marked_e2e)

BUDGET, RUN_USD = 10.0, 2.40
CHANNELS = [f"C0BURST{i:02d}" for i in range(20)]


@pytest.fixture
def budget_env(monkeypatch):
    # test_replicas's fixture builds the processes' environment from os.environ.
    monkeypatch.setenv("BUDGET_WORKSPACE_MONTHLY", str(BUDGET))


def month_ledger(redis_url: str):
    async def read():
        redis = Redis.from_url(redis_url)
        try:
            return await SpendLedger(redis).month("T0SANDBOX", month_of(time.time()))
        finally:
            await redis.aclose()

    return asyncio.run(read())


def test_concurrent_ups_in_many_channels_never_claim_past_the_workspace_budget(budget_env, replicas, redis_url):  # noqa: F811
    urls, secret, tpu, slack = replicas
    clients = [SlackRequests(f"{u}/slack/events", secret, response_url_factory=slack.response_url) for u in urls]

    def up(i: int):
        # Two requests per channel, through different processes; all name the priced zone.
        return clients[i % 2].slash("up us-west4-a 4h", user=f"U{i:03d}", channel=CHANNELS[i % len(CHANNELS)])

    try:
        with ThreadPoolExecutor(max_workers=40) as pool:
            replies = list(pool.map(up, range(40)))
    finally:
        for client in clients:
            client.close()

    assert all(r.status == 200 for r in replies), [r.status for r in replies]
    created = [r for r in replies if "Requested a v5litepod-1" in r.text]
    refused = [r for r in replies if "the workspace's" in r.text and "budget is $10.00" in r.text]
    held = [r for r in replies if "is held by <@U" in r.text]
    print(f"{len(created)} created, {len(refused)} refused by the workspace budget, {len(held)} held")
    assert len(created) == 4
    assert len(created) + len(refused) + len(held) == 40
    assert all("`/tpu up us-west4-a 0.6h` would fit." in r.text for r in refused
               if "$9.60 held" in r.text), refused[0].text
    ledger = month_ledger(redis_url)
    print(f"reserved ${ledger.reserved:.2f} of ${BUDGET:.2f} in {len(ledger.open)} open reservations")
    assert len(ledger.open) == 4 and abs(ledger.reserved - 4 * RUN_USD) < 1e-6
    assert ledger.spent + ledger.reserved <= BUDGET
    claimed_channels = {r.channel for r in ledger.open.values()}
    assert len(claimed_channels) == 4
