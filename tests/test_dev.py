"""`tpubot dev`: serve and worker as separate processes that share one embedded Redis, with the
sandbox TPU, Logging, Slack and model; a lease asked of the web process is provisioned by the
worker process, and Ctrl-C (SIGTERM) stops every part, the embedded Redis included."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
from waiting import wait_until

from bot.local_stack import free_port
from infra.sandbox.slack_requests import SlackRequests

TPUBOT = Path(sys.executable).with_name("tpubot")


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_dev_runs_serve_and_worker_on_one_redis_and_stops_them_all(tmp_path):
    secret = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "REDIS_", "GEMMA_"))}
    env.update(TPUBOT_ENV_FILE=os.devnull, SLACK_SIGNING_SECRET=secret, POLL_INTERVAL="0.2s")
    port = free_port()
    dev = subprocess.Popen([str(TPUBOT), "dev", "--port", str(port)], env=env, cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(dev.stdout), daemon=True)
    reader.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url), timeout=120, what="the dev web process ready")
        summary = "".join(output)
        assert "tpubot serve" in summary and "tpubot worker" in summary
        redis_port = int(re.search(r"embedded valkey redis://127\.0\.0\.1:(\d+)", summary).group(1))
        assert "shared" in summary
        for part in ("TPU API    sandbox", "Logging    sandbox", "Slack API  sandbox", "model      sandbox"):
            assert part in summary, summary
        assert secret not in summary

        slack = SlackRequests(f"{url}/slack/events", secret)
        try:
            assert "Requested a v5litepod-1" in slack.slash("up", user="UALICE", channel="C0DEV").text
            # Only the worker process provisions: ACTIVE here means it shares the web's Redis.
            wait_until(lambda: "ACTIVE" in slack.slash("status", user="UALICE", channel="C0DEV").text,
                       timeout=120, interval=0.5, what="the lease ACTIVE")
        finally:
            slack.close()
    finally:
        dev.send_signal(signal.SIGTERM)
        code = dev.wait(timeout=60)
    assert code == 0
    assert not _listening(port), "the web process outlived tpubot dev"
    assert not _listening(redis_port), "the embedded Redis outlived tpubot dev"
