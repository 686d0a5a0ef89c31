"""Real `tpubot serve` and `tpubot worker` processes through a 5-second Redis outage (a managed
failover or a maintenance restart): both stay up, /readyz says not-ready meanwhile and ready
after, work queued before the outage is done after it, and every log line is JSON without the
bot token."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis as redis_sync
from arq.jobs import Job, JobStatus
from waiting import wait_until

from agent.lease.idle import IDLE_JOB
from agent.lease.lifecycle import LeaseJob
from bot.local_stack import free_port
from handlers import cards
from handlers.slash import STILL_WORKING
from bot.wiring import arq_pool
from infra.jobs import QUEUE_NAME, JobQueue
from infra.sandbox.slack_api import SlackApiSandbox
from infra.sandbox.slack_requests import SlackRequests
from infra.sandbox.tpu_api import TpuSandbox
from infra.state import keys
from infra.state.redis_server import RestartableRedis

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)

TPUBOT = Path(sys.executable).with_name("tpubot")
OUTAGE_SECONDS = 5.0
CHANNEL = "C0FAILOVER"
ALICE = "UALICE"
TEAM = "T0SANDBOX"


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return 0


class Processes:
    def __init__(self, tmp_path: Path, redis_url: str) -> None:
        self.tpu = TpuSandbox()
        self.slack = SlackApiSandbox(token="xoxb-failover-" + secrets.token_hex(12))
        self.secret = secrets.token_hex(16)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "LOG_"))}
        env.update(REDIS_URL=redis_url, TPU_API_ENDPOINT=self.tpu.start(), SLACK_API_URL=self.slack.start(),
                   SLACK_BOT_TOKEN=self.slack.token, SLACK_SIGNING_SECRET=self.secret, POLL_INTERVAL="0.2s",
                   JOB_TIMEOUT="8s", LOCK_TTL="5s")
        self.port = free_port()
        self.logs = {name: tmp_path / f"{name}.log" for name in ("web", "worker")}
        commands = {"web": ["serve", "--port", str(self.port), "--host", "127.0.0.1"], "worker": ["worker"]}
        self.procs = {name: subprocess.Popen([str(TPUBOT), *command], env=env, cwd=tmp_path,
                                             stdout=self.logs[name].open("wb"), stderr=subprocess.STDOUT)
                      for name, command in commands.items()}
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests = SlackRequests(f"{self.url}/slack/events", self.secret,
                                      response_url_factory=self.slack.response_url)

    def log_lines(self, name: str) -> list[str]:
        return [line for line in self.logs[name].read_text(encoding="utf-8").splitlines() if line.strip()]

    def stop(self) -> dict[str, int]:
        self.requests.close()
        codes = {}
        for name, proc in self.procs.items():
            if proc.poll() is None:
                proc.terminate()
            try:
                codes[name] = proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        self.slack.stop()
        self.tpu.stop()
        return codes


@pytest.fixture
def failover(tmp_path):
    redis = RestartableRedis(free_port(), str(tmp_path / "redis")).start()
    processes = Processes(tmp_path, redis.url)
    try:
        yield redis, processes
    finally:
        processes.stop()
        redis.stop()
        # pytest shows a test's captured output only when it fails: then, what the processes did.
        for name in processes.logs:
            print(f"--- the last lines of {name}'s log", *processes.log_lines(name)[-80:], sep="\n")


def _queue_deferred_job(redis_url: str, job_id: str, seconds: float) -> None:
    async def queue() -> None:
        pool = await arq_pool(redis_url)
        try:
            from datetime import timedelta

            # An idle check of a lease that is gone: a real job that reads Redis and finishes.
            assert await JobQueue(pool, queue_name=QUEUE_NAME).enqueue(
                IDLE_JOB, LeaseJob(team="T0SANDBOX", channel="C0GONE", lease_id="L-gone"),
                job_id=job_id, defer_by=timedelta(seconds=seconds))
        finally:
            await pool.aclose()

    asyncio.run(queue())


def _job_status(redis_url: str, job_id: str) -> tuple[JobStatus, bool | None]:
    async def read() -> tuple[JobStatus, bool | None]:
        pool = await arq_pool(redis_url)
        try:
            job = Job(job_id, pool, _queue_name=QUEUE_NAME)
            info = await job.result_info()
            return await job.status(), (info.success and info.result == "stopped: lease gone" if info else None)
        finally:
            await pool.aclose()

    return asyncio.run(read())


def test_serve_and_worker_ride_out_a_five_second_redis_outage(failover):
    redis, procs = failover
    wait_until(lambda: _status(f"{procs.url}/readyz") == 200, timeout=60, what="web ready")
    wait_until(lambda: any("Starting worker" in line for line in procs.log_lines("worker")), timeout=60,
               what="worker started")

    # Work queued before the outage: a /tpu up (its provisioning spans the outage) and a job due
    # in the middle of it.
    reply = procs.requests.slash("up", user=ALICE, channel=CHANNEL)
    assert reply.status == 200
    # Accepted before the outage: on a busy machine the answer can outlast the ack budget and come
    # by response_url; the outage must not start while the request is still being taken.
    answer = reply.text if reply.text != STILL_WORKING else wait_until(
        lambda: next((r.get("text", "") for r in procs.slack.responses), None), timeout=30,
        what="the late answer to /tpu up")
    assert "Requested" in answer, answer
    _queue_deferred_job(redis.url, "queued-before-outage", seconds=OUTAGE_SECONDS / 2)

    redis.stop()
    outage_started = time.monotonic()
    wait_until(lambda: _status(f"{procs.url}/readyz") == 503, timeout=5, what="/readyz reports the outage")
    assert _status(f"{procs.url}/healthz") == 200
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - outage_started)))  # the outage itself
    assert all(proc.poll() is None for proc in procs.procs.values()), "a process exited during the outage"
    redis.start()

    wait_until(lambda: _status(f"{procs.url}/readyz") == 200, timeout=30, what="/readyz back to 200")
    assert wait_until(lambda: _job_status(redis.url, "queued-before-outage") == (JobStatus.complete, True),
                      timeout=60, what="the job queued before the outage ran")
    wait_until(lambda: any("ACTIVE" in str(c.body.get("blocks")) for c in procs.slack.calls_to("chat.update")),
               timeout=90, what="the lease requested before the outage became ACTIVE")
    assert len(procs.tpu.queued_resources()) == 1
    assert "ACTIVE" in procs.requests.slash("status", user=ALICE, channel=CHANNEL).text
    assert all(proc.poll() is None for proc in procs.procs.values()), "a process exited after the outage"

    codes = procs.stop()
    assert codes == {"web": 0, "worker": 0}, codes
    worker_lines, web_lines = procs.log_lines("worker"), procs.log_lines("web")
    assert any("Redis is unreachable" in line for line in worker_lines)
    assert any("Redis is back" in line for line in worker_lines)
    assert any("listening on http://127.0.0.1" in line for line in web_lines)
    for line in worker_lines + web_lines:
        entry = json.loads(line)  # every line a JSON object, tracebacks included
        assert {"time", "level", "logger", "message", "request_id", "lease_id"} <= entry.keys()
        assert procs.slack.token not in line and procs.secret not in line


def _serve_on_embedded_redis(tmp_path) -> tuple[subprocess.Popen, int]:
    """`tpubot serve` without REDIS_URL, ready, and the port of the embedded Redis it started."""
    import re

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "REDIS_", "LOG_"))}
    env.update(TPUBOT_ENV_FILE=os.devnull, SLACK_BOT_TOKEN="xoxb-embedded-" + secrets.token_hex(8),
               SLACK_SIGNING_SECRET=secrets.token_hex(16))
    port, log = free_port(), tmp_path / "web.log"
    web = subprocess.Popen([str(TPUBOT), "serve", "--port", str(port), "--host", "127.0.0.1"], env=env, cwd=tmp_path,
                           stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _status(f"http://127.0.0.1:{port}/readyz") == 200, timeout=60)
        return web, int(re.search(r"embedded Redis at redis://127\.0\.0\.1:(\d+)", log.read_text()).group(1))
    except BaseException:
        web.kill()
        web.wait(timeout=30)
        raise


def _answers(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_serve_stops_its_embedded_redis_on_sigterm(tmp_path):
    import signal

    web, redis_port = _serve_on_embedded_redis(tmp_path)
    web.send_signal(signal.SIGTERM)
    assert web.wait(timeout=30) == 0
    assert not _answers(redis_port), "the embedded Redis outlived `tpubot serve`"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal (prctl) is Linux's")
def test_an_embedded_redis_stops_when_serve_is_killed(tmp_path):
    """A SIGKILL runs no `finally` to stop the server, which is in a session of its own (a Ctrl-C
    must not reach it): the kernel stops it when its parent dies (infra/state/redis_server.py)."""
    web, redis_port = _serve_on_embedded_redis(tmp_path)
    assert _answers(redis_port)
    web.kill()
    web.wait(timeout=30)
    wait_until(lambda: not _answers(redis_port), timeout=30, what="the embedded Redis gone with `tpubot serve`")


SLACK_ACK_WINDOW_SECONDS = 3.0


def _redis_get(url: str, key: str) -> bytes | None:
    client = redis_sync.Redis.from_url(url)
    try:
        return client.get(key)
    finally:
        client.close()


def _audit_outcomes(url: str) -> list[str]:
    client = redis_sync.Redis.from_url(url)
    try:
        return [fields[b"outcome"].decode() for _id, fields in client.xrange(keys.audit_stream())]
    finally:
        client.close()


def _mention_queued(url: str) -> bool:
    """The mention's delivery markers are set: they and its job are written in one step."""
    client = redis_sync.Redis.from_url(url)
    try:
        return bool(client.exists(keys.dedupe("event", "EvFROZEN1")))
    finally:
        client.close()


def test_commands_clicks_and_mentions_are_acked_within_slacks_window_while_redis_is_frozen(failover):
    """A paused primary (SIGSTOP: connections open, nothing answers) for 5 s: every ack is inside
    Slack's 3 s, through a client that gives up at 3 s as Slack does. The work is not cut: the
    command's answer follows on its response_url after the thaw, the lease it asked for is
    provisioned, and the mention is answered (Slack's retry of it finds it queued)."""
    redis, procs = failover
    wait_until(lambda: _status(f"{procs.url}/readyz") == 200, timeout=60, what="web ready")
    assert "holds no TPU" in procs.requests.slash("status", user=ALICE, channel=CHANNEL).text
    def impatient(send):  # a client that gives up at 3 s, as Slack does
        client = SlackRequests(f"{procs.url}/slack/events", procs.secret, timeout=SLACK_ACK_WINDOW_SECONDS,
                               response_url_factory=procs.slack.response_url)
        try:
            return send(client)
        finally:
            client.close()

    requests = {
        "status": lambda client: client.slash("status", user=ALICE, channel=CHANNEL),
        "up": lambda client: client.slash("up", user=ALICE, channel=CHANNEL),
        "mention": lambda client: client.mention("<@UTPUBOT> what is this?\nERROR boom", user=ALICE,
                                                 channel=CHANNEL, event_id="EvFROZEN1", ts="1700000000.000100"),
        "joined": lambda client: client.event({"type": "member_joined_channel", "user": "UTPUBOT", "channel": CHANNEL,
                                               "channel_type": "C", "team": TEAM}, event_id="EvFROZEN2"),
    }
    redis.freeze()
    try:
        frozen_at = time.monotonic()
        with ThreadPoolExecutor(len(requests)) as pool:  # at once, as Slack's users would
            replies = dict(zip(requests, pool.map(impatient, requests.values())))
        assert time.monotonic() - frozen_at < OUTAGE_SECONDS, "the freeze ended before the acks came back"
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - frozen_at)))  # the rest of the freeze
    finally:
        redis.thaw()
    status, up, mention, joined = replies["status"], replies["up"], replies["mention"], replies["joined"]

    assert status.status == 200 and "follows here" in status.text, status
    assert up.status == 200 and "follows here" in up.text, up
    # Not queued within the budget: Slack is told to retry, and the queueing goes on.
    assert mention.status == 500, mention
    # The bot's own membership write held the ack too: Slack is told to retry, and the write lands.
    assert joined.status == 500, joined
    wait_until(lambda: _redis_get(redis.url, keys.membership(TEAM, CHANNEL)) is not None, timeout=30,
               what="the membership written after the thaw")
    assert procs.requests.event({"type": "member_joined_channel", "user": "UTPUBOT", "channel": CHANNEL,
                                 "channel_type": "C", "team": TEAM}, event_id="EvFROZEN2").status == 200
    wait_until(lambda: len(procs.slack.responses) >= 2, timeout=30, what="both late answers")
    late = [str(response) for response in procs.slack.responses]
    assert any("holds no TPU" in text for text in late) and any("Requested a" in text for text in late), late
    wait_until(lambda: any("ACTIVE" in str(c.body.get("blocks")) for c in procs.slack.calls_to("chat.update")),
               timeout=90, what="the lease asked for during the freeze became ACTIVE")
    assert len(procs.tpu.queued_resources()) == 1

    # The queueing that overran its budget went on and landed: Slack's retry is then a repeat,
    # and the mention is answered once.
    wait_until(lambda: _mention_queued(redis.url), timeout=30, what="the overrun mention's job queued")
    retry = procs.requests.mention("<@UTPUBOT> what is this?\nERROR boom", user=ALICE, channel=CHANNEL,
                                   event_id="EvFROZEN1", ts="1700000000.000100", retry_num=1)
    assert retry.status == 200
    wait_until(lambda: "duplicate_event" in _audit_outcomes(redis.url), timeout=30, what="the retry taken as a repeat")
    status_lines = lambda: [c for c in procs.slack.calls_to("chat.postMessage")  # noqa: E731
                            if c.body.get("thread_ts") == "1700000000.000100" and "Reading your" in str(c.body)]
    wait_until(status_lines, timeout=60, what="the mention answered")
    assert len(status_lines()) == 1, status_lines()  # one answer, however many deliveries

    # A click caught in a freeze: acked empty in time, its reply posted when the teardown is recorded.
    confirm = procs.requests.slash("down", user=ALICE, channel=CHANNEL).json()
    button = next(e for b in confirm["blocks"] if b["type"] == "actions" for e in b["elements"]
                  if e["action_id"] == cards.TEARDOWN_CONFIRM_ACTION)
    redis.freeze()
    try:
        frozen_at = time.monotonic()
        click = impatient(lambda client: client.click(action_id=button["action_id"], value=button["value"],
                                                      user=ALICE, channel=CHANNEL, label="Tear down"))
        assert time.monotonic() - frozen_at < OUTAGE_SECONDS, "the freeze ended before the ack came back"
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - frozen_at)))
    finally:
        redis.thaw()
    assert click.status == 200, click
    wait_until(lambda: any("Tearing down" in str(r) for r in procs.slack.responses), timeout=30,
               what="the click's late reply")
    wait_until(lambda: procs.tpu.queued_resources() == [], timeout=60, what="the TPU torn down")
    assert not any("Traceback" in line for line in procs.log_lines("web"))


def test_a_timed_out_click_or_command_is_never_told_nothing_changed():
    """A write the client stopped waiting for may still land when a frozen server catches up."""
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    from handlers.late_answers import STATE_STORE_DOWN, STATE_STORE_SLOW, state_store_notice

    assert state_store_notice(RedisTimeoutError("Timeout reading from socket")) == STATE_STORE_SLOW
    assert "nothing changed" not in STATE_STORE_SLOW and "may or may not" in STATE_STORE_SLOW
    assert state_store_notice(RedisConnectionError("Connection refused")) == STATE_STORE_DOWN
