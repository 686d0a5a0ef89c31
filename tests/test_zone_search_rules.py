"""ZoneSearch decisions against the TPU emulator (real client, real Redis), without Slack."""

from __future__ import annotations

import asyncio

import pytest
from google.auth.credentials import AnonymousCredentials
from redis.asyncio import Redis

from agent.lease.zone_search import ZoneSearch
from infra.sandbox.tpu_api import TpuSandbox, ZoneBehaviour
from infra.scoreboard import ZoneScoreboard
from infra.tpu import QrSpec, TpuConfig, TpuService, bot_labels

V5E = ("v5litepod-1", "v5litepod-4")
WORLD = {"europe-west4-a": ZoneBehaviour.REJECT_FLEX_START, "asia-east1-a": ZoneBehaviour.ACCEPT,
         "us-west4-a": ZoneBehaviour.ACCEPT}


@pytest.fixture
def cloud():
    with TpuSandbox(zones=WORLD, accelerators={"asia-east1-a": ("v6e-1",)}, time_scale=0.05) as sandbox:
        service = TpuService(TpuConfig(project="tpubot-sandbox", api_endpoint=sandbox.base_url),
                             credentials=AnonymousCredentials(), lro_poll_interval=0.01)
        yield sandbox, service
        service.close()


@pytest.fixture
async def board(redis_url):
    redis = Redis.from_url(redis_url)
    yield ZoneScoreboard(redis, "v5litepod-1")
    await redis.aclose()


def creator(service: TpuService):
    async def create(zone: str, n: int, total: int):
        spec = QrSpec(qr_id="tpubot-rules1", node_id="tpubot-rules1-node", zone=zone,
                      labels=bot_labels("T", "C", "rules1"), startup_script="#!/bin/bash\ntrue\n")
        return await asyncio.to_thread(service.create_queued_resource, spec)

    return create


async def test_a_zone_lacking_the_type_is_skipped_when_others_offer_it(cloud, board):
    sandbox, service = cloud
    search = ZoneSearch(service, board, zones=list(WORLD), default_zone="europe-west4-a")
    await board.set_offers("europe-west4-a", True)  # asia-east1-a unknown: its look-up "failed"
    outcome = await search.run(["europe-west4-a", "asia-east1-a", "us-west4-a"], creator(service))
    assert outcome.status == "created" and outcome.zone == "us-west4-a"
    assert [a.outcome for a in sandbox.create_attempts] == ["flex_start_rejected", "bad_accelerator", "accepted"]
    assert (await board.offers(["asia-east1-a"]))["asia-east1-a"] is False


async def test_an_accelerator_no_zone_is_known_to_offer_stops_the_search(cloud, board):
    sandbox, service = cloud
    search = ZoneSearch(service, board, zones=list(WORLD), default_zone="asia-east1-a")
    outcome = await search.run(["asia-east1-a", "us-west4-a"], creator(service))
    assert outcome.status == "configuration" and outcome.setting == "TPU_ACCELERATOR_TYPE"
    assert len(sandbox.create_attempts) == 1


async def test_plan_filters_zones_by_their_accelerator_list(cloud, board):
    _, service = cloud
    plan = await ZoneSearch(service, board, zones=list(WORLD), default_zone="europe-west4-a").plan()
    assert plan.not_offered == ["asia-east1-a"] and plan.order == ["europe-west4-a", "us-west4-a"]
