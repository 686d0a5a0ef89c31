"""Several replicas, one Redis: 50 concurrent `/tpu up` through two separate `tpubot serve`
processes (and a separate `tpubot worker`) create exactly one queued resource."""

from __future__ import annotations

import functools
import os
import secrets
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import waiting

from bot.local_stack import free_port
from infra.sandbox.slack_api import SlackApiSandbox
from infra.sandbox.slack_requests import SlackRequests
from infra.sandbox.tpu_api import TpuSandbox

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)

TPUBOT = Path(sys.executable).with_name("tpubot")
CHANNEL = "C0RACE"


wait_until = functools.partial(waiting.wait_until, timeout=60.0)


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def replicas(redis_url, tmp_path):
    tpu = TpuSandbox()
    slack = SlackApiSandbox(token="xoxb-replica-test")
    secret = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_"))}
    env.update(REDIS_URL=redis_url, TPU_API_ENDPOINT=tpu.start(), SLACK_API_URL=slack.start(),
               SLACK_BOT_TOKEN=slack.token, SLACK_SIGNING_SECRET=secret, POLL_INTERVAL="0.2s")
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([str(TPUBOT), "serve", "--port", str(p), "--host", "127.0.0.1"], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for p in ports]
    procs.append(subprocess.Popen([str(TPUBOT), "worker"], env=env, cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        wait_until(lambda: all(healthy(u) for u in urls), timeout=60)
        yield urls, secret, tpu, slack
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        slack.stop()
        tpu.stop()


def test_fifty_concurrent_ups_across_two_web_processes_create_one_qr(replicas):
    urls, secret, tpu, slack = replicas
    clients = [SlackRequests(f"{u}/slack/events", secret, response_url_factory=slack.response_url) for u in urls]

    def up(i: int):
        return clients[i % 2].slash("up", user=f"U{i:03d}", channel=CHANNEL)

    with ThreadPoolExecutor(max_workers=50) as pool:
        replies = list(pool.map(up, range(50)))

    assert all(r.status == 200 for r in replies), [r.status for r in replies]
    created = [r for r in replies if "Requested a v5litepod-1" in r.text]
    held = [r for r in replies if "is held by <@U" in r.text]
    assert len(created) == 1 and len(held) == 49
    # Every loser names the same holder: the winner.
    holders = {r.text.split("held by <@")[1].split(">")[0] for r in held}
    assert len(holders) == 1

    wait_until(lambda: any(q["state"] == "ACTIVE" for q in tpu.queued_resources()))
    assert len(tpu.queued_resources()) == 1
    assert len([a for a in tpu.create_attempts]) == 1
    assert len(slack.calls_to("chat.postMessage")) == 1
    for client in clients:
        client.close()
