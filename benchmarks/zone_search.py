"""Zone search benchmark: attempts and simulated time to the first accepted zone, ours vs naive.

    .venv/bin/python benchmarks/zone_search.py [--list-seconds 0.5] [--lro-seconds 25] [--sync-seconds 1]

The sandbox is set up like the world the seed met (infra/sandbox/world.py `seed_world`): 44 zones
with preemptible v5e quota, v5e offered in eleven of them, flex-start v5litepod-1 accepted only in
us-west4-a, and europe-west4-a as the configured default (TPU_ZONE), TPU_ZONES = all 44.

Strategies, each run with the real TPU client against the emulator:
- naive: the configured default first, then every zone with quota (the Cloud Quotas API's zone
  dimensions, in its order), trying each until one accepts — no memory between runs;
- scoreboard, cold: `agent.lease.zone_search.ZoneSearch` on an empty scoreboard (Redis);
- scoreboard, warm: the same search again after the first TPU was deleted (the next `/tpu up`).

Simulated time is not wall time (the emulator answers in milliseconds): it is the cloud time the
same calls would take, from the cost model on the command line — an acceleratorTypes list call
(the search makes them 8 at a time),
a create that waits for its LRO (flex-start rejections arrive as LRO errors, acceptances when the
QR leaves CREATING), and a create refused synchronously (e.g. the accelerator not offered).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.auth.credentials import AnonymousCredentials  # noqa: E402
from google.cloud import cloudquotas_v1  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from agent.lease.zone_search import LIST_CONCURRENCY, ZoneSearch  # noqa: E402
from infra.scoreboard import ZoneScoreboard  # noqa: E402
from infra.state.redis_server import ensure_redis  # noqa: E402
from infra.preflight import PREEMPTIBLE_QUOTA_IDS, QUOTA_SERVICE  # noqa: E402
from infra.sandbox.world import SEED_DEFAULT_ZONE, SEED_ZONES, CloudSandbox, seed_world  # noqa: E402
from infra.tpu import QrSpec, TpuConfig, TpuError, TpuService, bot_labels  # noqa: E402

ACCELERATOR = "v5litepod-1"
PROJECT = "tpubot-sandbox"
LRO_OUTCOMES = {"accepted", "flex_start_rejected", "queued_without_capacity"}


@dataclass
class Run:
    strategy: str
    attempts: int
    list_calls: int
    zone: str
    simulated_s: float
    wall_ms: float


def spec_for(zone: str, n: int) -> QrSpec:
    lease = f"bench{n:04d}"
    return QrSpec(qr_id=f"tpubot-{lease}", node_id=f"tpubot-{lease}-node", zone=zone,
                  labels=bot_labels("TBENCH", "CBENCH", lease), startup_script="#!/bin/bash\ntrue\n")


def quota_zones(cloud: CloudSandbox) -> list[str]:
    """Every zone where the preemptible v5e quota is above zero, as the Cloud Quotas API lists them."""
    client = cloudquotas_v1.CloudQuotasClient(transport="rest", credentials=AnonymousCredentials(),
                                              client_options={"api_endpoint": cloud.project_api.base_url})
    quota_id = PREEMPTIBLE_QUOTA_IDS["v5litepod"]
    info = client.get_quota_info(name=f"projects/{PROJECT}/locations/global/services/{QUOTA_SERVICE}/quotaInfos/"
                                      f"{quota_id}")
    return [dict(d.dimensions)["zone"] for d in info.dimensions_infos if int(d.details.value) > 0]


def simulated_seconds(cloud: CloudSandbox, since_attempt: int, since_request: int, args) -> tuple[float, int, int]:
    attempts = cloud.tpu.create_attempts[since_attempt:]
    requests = list(cloud.tpu.requests)[since_request:]
    list_calls = sum(1 for r in requests if r.method == "GET" and r.path.endswith("/acceleratorTypes"))
    seconds = math.ceil(list_calls / LIST_CONCURRENCY) * args.list_seconds  # looked up 8 at a time
    for attempt in attempts:
        seconds += args.lro_seconds if attempt.outcome in LRO_OUTCOMES else args.sync_seconds
    return seconds, len(attempts), list_calls


def delete_all(tpu: TpuService, cloud: CloudSandbox) -> None:
    for qr in cloud.tpu.queued_resources():
        tpu.delete_queued_resource(qr["zone"], qr["qr_id"])


def naive(tpu: TpuService, cloud: CloudSandbox, args, label: str, n: int) -> Run:
    order = [SEED_DEFAULT_ZONE] + [z for z in quota_zones(cloud) if z != SEED_DEFAULT_ZONE]
    mark_a, mark_r = len(cloud.tpu.create_attempts), len(cloud.tpu.requests)
    start = time.perf_counter()
    accepted = ""
    for zone in order:
        try:
            tpu.create_queued_resource(spec_for(zone, n))
        except TpuError:
            continue
        accepted = zone
        break
    wall = (time.perf_counter() - start) * 1000
    seconds, attempts, lists = simulated_seconds(cloud, mark_a, mark_r, args)
    return Run(label, attempts, lists, accepted, seconds, wall)


async def scoreboard(tpu: TpuService, cloud: CloudSandbox, board: ZoneScoreboard, args, label: str, n: int) -> Run:
    search = ZoneSearch(tpu, board, zones=SEED_ZONES, default_zone=SEED_DEFAULT_ZONE)
    mark_a, mark_r = len(cloud.tpu.create_attempts), len(cloud.tpu.requests)
    start = time.perf_counter()
    plan = await search.plan()

    async def create(zone: str, i: int, total: int):
        return await asyncio.to_thread(tpu.create_queued_resource, spec_for(zone, n))

    outcome = await search.run(plan.order, create, lease_id=f"bench{n:04d}")
    wall = (time.perf_counter() - start) * 1000
    seconds, attempts, lists = simulated_seconds(cloud, mark_a, mark_r, args)
    return Run(label, attempts, lists, outcome.zone, seconds, wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list-seconds", type=float, default=0.5, help="one acceleratorTypes list call")
    parser.add_argument("--lro-seconds", type=float, default=25.0, help="a create that waits for its LRO")
    parser.add_argument("--sync-seconds", type=float, default=1.0, help="a create refused synchronously")
    args = parser.parse_args()

    endpoint = ensure_redis("")
    cloud = CloudSandbox(seed_world(), project=PROJECT, time_scale=0.02).start()
    tpu = TpuService(TpuConfig(project=PROJECT, api_endpoint=cloud.tpu.base_url), credentials=AnonymousCredentials(),
                     lro_poll_interval=0.01)
    runs: list[Run] = []
    try:
        runs.append(naive(tpu, cloud, args, "naive (default, then every zone with quota), 1st up", 1))
        delete_all(tpu, cloud)
        runs.append(naive(tpu, cloud, args, "naive, next up (no memory)", 2))
        delete_all(tpu, cloud)

        async def ours() -> None:
            redis = Redis.from_url(endpoint.url)
            try:
                board = ZoneScoreboard(redis, ACCELERATOR)
                runs.append(await scoreboard(tpu, cloud, board, args, "scoreboard, cold (1st up)", 3))
                await asyncio.to_thread(delete_all, tpu, cloud)
                runs.append(await scoreboard(tpu, cloud, board, args, "scoreboard, warm (next up)", 4))
            finally:
                await redis.aclose()

        asyncio.run(ours())
        delete_all(tpu, cloud)
    finally:
        tpu.close()
        cloud.stop()
        endpoint.stop()

    print(f"zone search, seed world: {len(SEED_ZONES)} zones with quota, flex-start {ACCELERATOR} accepted only in "
          f"us-west4-a, default {SEED_DEFAULT_ZONE}")
    print(f"cost model: acceleratorTypes list {args.list_seconds:g} s, create with LRO {args.lro_seconds:g} s, "
          f"create refused synchronously {args.sync_seconds:g} s\n")
    print(f"{'strategy':<54}{'attempts':>9}{'list calls':>12}{'accepted in':>14}{'simulated':>12}{'wall ms':>10}")
    for run in runs:
        print(f"{run.strategy:<54}{run.attempts:>9}{run.list_calls:>12}{run.zone or '—':>14}"
              f"{_clock(run.simulated_s):>12}{run.wall_ms:>10.0f}")
    unplaced = [run.strategy for run in runs if not run.zone]
    if unplaced:
        raise SystemExit(f"no zone accepted the TPU for: {', '.join(unplaced)} (the seed world accepts us-west4-a)")


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


if __name__ == "__main__":
    main()
