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
from urllib.parse import urlsplit

import httpx
from waiting import wait_until

from bot.local_stack import free_port
from infra.sandbox.slack_requests import SlackRequests
import pytest

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)

TPUBOT = Path(sys.executable).with_name("tpubot")



def sandbox_hooks(summary: str):
    """response_urls on dev's Slack stand-in, as Slack gives its own: the web process accepts no other host."""
    api = re.search(r"Slack API\s+sandbox\s+(\S+)", summary).group(1)
    parts = urlsplit(api)
    return lambda name: f"{parts.scheme}://{parts.netloc}/hooks/{name}/1"

def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def dev_env(secret: str) -> dict[str, str]:
    """A newcomer's environment for `tpubot dev`: none of the caller's Slack, GCP, TPU, Redis or model settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "REDIS_", "GEMMA_"))}
    env.update(TPUBOT_ENV_FILE=os.devnull, SLACK_SIGNING_SECRET=secret, POLL_INTERVAL="0.2s")
    return env


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _pid(summary: str, name: str) -> int:
    return int(re.search(rf"^\s+{name}\s+tpubot \w+\s+pid (\d+)", summary, re.MULTILINE).group(1))


def test_dev_runs_serve_and_worker_on_one_redis_restarts_a_killed_child_and_stops_them_all(tmp_path):
    """One `tpubot dev` for the whole life: started, it provisions through its first worker; each
    child killed is restarted and the stack still answers (the restarted worker provisions a second
    channel); SIGTERM then stops every part. (Two runs of `tpubot dev` proved nothing one does not.)"""
    secret = secrets.token_hex(16)
    env = dev_env(secret)
    port = free_port()
    dev = subprocess.Popen([str(TPUBOT), "dev", "--port", str(port)], env=env, cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output: list[str] = []
    errors: list[str] = []
    for stream, lines in ((dev.stdout, output), (dev.stderr, errors)):
        threading.Thread(target=lambda s=stream, o=lines: o.extend(s), daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    slack = None
    try:
        wait_until(lambda: _ready(url), timeout=120, what="the dev web process ready")
        summary = "".join(output)
        assert "tpubot serve" in summary and "tpubot worker" in summary
        redis_port = int(re.search(r"embedded valkey redis://127\.0\.0\.1:(\d+)", summary).group(1))
        assert "shared" in summary
        for part in ("TPU API    sandbox", "Logging    sandbox", "Slack API  sandbox", "model      sandbox"):
            assert part in summary, summary
        assert secret not in summary

        slack = SlackRequests(f"{url}/slack/events", secret, response_url_factory=sandbox_hooks(summary))
        assert "Requested a v5litepod-1" in slack.slash("up", user="UALICE", channel="C0DEV").text
        # Only the worker process provisions: ACTIVE here means it shares the web's Redis.
        wait_until(lambda: "ACTIVE" in slack.slash("status", user="UALICE", channel="C0DEV").text,
                   timeout=120, interval=0.5, what="the lease ACTIVE")
        # What the bot posts to the Slack stand-in is printed, as the shell prints it (issue 44: nothing was).
        assert "What the bot posts to the Slack stand-in is printed here" in summary
        shown = wait_until(lambda: "".join(output).count("tpubot updated:") and "".join(output), timeout=30,
                           what="the card's updates printed")
        assert "[#C0DEV] tpubot posted: == TPU us-west4-a · REQUESTED ==" in shown

        os.kill(_pid(summary, "worker"), signal.SIGKILL)
        wait_until(lambda: any("tpubot dev: worker restarted" in line for line in errors), timeout=30,
                   what="the worker restarted")
        assert any("tpubot dev: worker exited (-9)" in line and "restarting it in" in line for line in errors)
        # Only a worker provisions: ACTIVE means the restarted one runs jobs.
        assert "Requested a v5litepod-1" in slack.slash("up", user="UALICE", channel="C0DEV2").text
        wait_until(lambda: "ACTIVE" in slack.slash("status", user="UALICE", channel="C0DEV2").text,
                   timeout=120, interval=0.5, what="the lease ACTIVE")

        os.kill(_pid(summary, "web"), signal.SIGKILL)
        wait_until(lambda: any("tpubot dev: web restarted" in line for line in errors), timeout=30,
                   what="the web process restarted")
        wait_until(lambda: _ready(url), timeout=120, what="the restarted web process ready")
        assert "ACTIVE" in slack.slash("status", user="UALICE", channel="C0DEV2").text
        assert dev.poll() is None
    finally:
        if slack is not None:
            slack.close()
        dev.send_signal(signal.SIGTERM)
        code = dev.wait(timeout=60)
    assert code == 0
    assert not _listening(port), "the web process outlived tpubot dev"
    assert not _listening(redis_port), "the embedded Redis outlived tpubot dev"


def test_a_child_that_dies_as_it_starts_is_given_up_on_with_one_line():
    from bot.dev_stack import QUICK_DEATHS_TO_GIVE_UP, Child, Supervisor

    said: list[str] = []
    supervisor = Supervisor({"broken": Child("broken", [sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ))},
                            say=said.append)
    supervisor.start()
    code = wait_until(lambda: supervisor.check(), timeout=60, interval=0.1, what="the supervisor giving up")
    assert code == 1
    restarts = [line for line in said if "restarting it in" in line]
    assert len(restarts) == QUICK_DEATHS_TO_GIVE_UP - 1
    assert [line.split("restarting it in ")[1] for line in restarts] == ["0.5s", "1s", "2s", "4s"]  # a backoff
    assert said[-1].startswith("tpubot dev: broken exited (3) within 10s of starting 5 times in a row; giving up")
    assert sum("giving up" in line for line in said) == 1
