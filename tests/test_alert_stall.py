"""A stalled Redis (issue 42): the primary paused (SIGSTOP: connections open, nothing answers), as
a slow disk or a VM pause stalls it. PagerDuty waits 5 s for a 2xx and retries otherwise
(PagerDuty/developer-docs, docs/webhooks/02-Behavior.md); the alert routes must answer within
that, and with a status the senders retry. The queueing that overran goes on: the sender's retry
after the thaw is then one delivery, not two."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis as redis_sync

from alert_payloads import (AM_TOKEN, CM_TOKEN, PD_SECRET, ROUTES, alertmanager, cloud_monitoring, pagerduty, pd_signature,
                            send_am, send_cm, send_pd)
from bot.local_stack import LocalStack, free_port
from bot.settings import Settings
from infra.jobs import QUEUE_NAME
from infra.state import keys
from infra.state.redis_server import RestartableRedis
from waiting import wait_until

pytestmark = pytest.mark.e2e  # runs our own processes or a LocalStack (conftest end_to_end_work_is_marked_e2e)

PAGERDUTY_DEADLINE_SECONDS = 5.0


@pytest.fixture
def stalling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    redis = RestartableRedis(free_port(), str(tmp_path / "redis")).start()
    settings = Settings.load(tmp_path / "none.env", redis_url=redis.url, alert_routes=ROUTES,
                             alertmanager_webhook_token=AM_TOKEN, cloud_monitoring_token=CM_TOKEN,
                             pagerduty_webhook_secret=PD_SECRET)
    stack = LocalStack(settings, run_worker=False).start()  # no worker: what is queued stays countable
    try:
        yield redis, stack
    finally:
        stack.stop()
        redis.stop()


def queued_alert_jobs(url: str) -> list[str]:
    client = redis_sync.Redis.from_url(url)
    try:
        return sorted(job.decode() for job in client.zrange(QUEUE_NAME, 0, -1) if job.startswith(b"alert:"))
    finally:
        client.close()


def test_a_stalled_redis_is_a_fast_503_and_the_retry_after_it_is_one_delivery(stalling):
    redis, stack = stalling
    # A client that gives up when PagerDuty does.
    with httpx.Client(base_url=stack.web_url, timeout=PAGERDUTY_DEADLINE_SECONDS) as http:
        assert send_pd(http, pagerduty(event_id="before-stall")).status_code == 202  # connections made
        stalled = pagerduty(event_id="during-stall", incident_id="PSTALL1")
        group = alertmanager(group_key="stalled-group")
        incident = cloud_monitoring("0.stalled")
        redis.freeze()
        try:
            with ThreadPoolExecutor(3) as pool:  # at once, as three senders would
                answers = list(pool.map(timed, [lambda: send_pd(http, stalled), lambda: send_am(http, group),
                                                lambda: send_cm(http, incident)]))
        finally:
            redis.thaw()  # only now: every answer came while nothing answered
        (pd, pd_seconds), (am, am_seconds), (cm, cm_seconds) = answers
        print(f"answers while Redis was paused: PagerDuty {pd.status_code} in {pd_seconds:.2f}s, "
              f"Alertmanager {am.status_code} in {am_seconds:.2f}s, Cloud Monitoring {cm.status_code} in {cm_seconds:.2f}s")
        assert pd.status_code == 503 and "send it again" in pd.json()["error"], pd.text
        assert am.status_code == 503 and cm.status_code == 503, (am.text, cm.text)
        assert max(pd_seconds, am_seconds, cm_seconds) < PAGERDUTY_DEADLINE_SECONDS

        # The queueing went on and landed after the thaw; the senders' retries find it.
        marker = keys.dedupe("alert", "pagerduty:during-stall")
        with redis_sync.Redis.from_url(redis.url) as state:
            wait_until(lambda: state.exists(marker), timeout=30, what="the stalled delivery queued after the thaw")
        retry = send_pd(http, stalled)
        assert retry.status_code == 200 and retry.json()["duplicate"] is True, retry.text
        am_retry = send_am(http, group)
        assert am_retry.status_code == 200 and am_retry.json()["duplicate"] is True, am_retry.text
        cm_retry = send_cm(http, incident)
        assert cm_retry.status_code == 200 and cm_retry.json()["duplicate"] is True, cm_retry.text
    jobs = queued_alert_jobs(redis.url)
    assert len([job for job in jobs if "during-stall" in job]) == 1, jobs
    assert len([job for job in jobs if job.startswith("alert:alertmanager:")]) == 1, jobs
    assert len([job for job in jobs if job.startswith("alert:cloud-monitoring:")]) == 1, jobs
    assert len(jobs) == 4, jobs  # one before, one per sender during: nothing twice


def timed(send):
    started = time.monotonic()
    response = send()
    return response, time.monotonic() - started


def test_the_budget_counts_from_the_requests_arrival_not_from_its_last_byte(stalling):
    """A sender whose body takes 2.5 s to arrive while Redis is paused still has its answer within
    PagerDuty's 5 s of its first byte (the budget used to start after the body was read: 5.5 s)."""
    import socket
    from urllib.parse import urlsplit

    redis, stack = stalling
    with httpx.Client(base_url=stack.web_url, timeout=PAGERDUTY_DEADLINE_SECONDS) as http:
        assert send_pd(http, pagerduty(event_id="warm-up")).status_code == 202  # connections made
    body = json.dumps(pagerduty(event_id="slow-body", incident_id="PSLOW01")).encode()
    address = urlsplit(stack.web_url)
    redis.freeze()
    try:
        with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
            started = time.monotonic()
            sock.sendall(b"POST /alerts/pagerduty HTTP/1.1\r\nHost: tpubot\r\nContent-Type: application/json\r\n"
                         b"X-PagerDuty-Signature: " + pd_signature(body, PD_SECRET).encode() + b"\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:50])
            time.sleep(2.5)  # the sender's pace, not a wait for our work
            sock.sendall(body[50:])
            answer = sock.recv(4096)
            seconds = time.monotonic() - started
    finally:
        redis.thaw()
    print(f"a body that took 2.5 s to arrive, Redis paused: answered in {seconds:.2f}s from its first byte")
    assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
    assert seconds < PAGERDUTY_DEADLINE_SECONDS


def test_while_redis_stays_paused_waiting_queueings_are_bounded_and_then_answered_at_once(stalling, caplog):
    """Each 503 leaves its queueing waiting on Redis, holding the delivery: at LATE_QUEUEINGS_MAX
    of them a new delivery is a 503 at once, nothing of it started; after the thaw the waiting
    ones land (their log lines say so), and the refused one's retry is queued as new."""
    import asyncio
    import logging

    from bot.alert_webhooks import LATE_QUEUEINGS_MAX

    redis, stack = stalling
    caplog.set_level(logging.WARNING, logger="bot.alert_webhooks")
    with httpx.Client(base_url=stack.web_url, timeout=PAGERDUTY_DEADLINE_SECONDS) as http:
        assert send_pd(http, pagerduty(event_id="warm-up")).status_code == 202

    def signed(event_id: str) -> tuple[bytes, dict[str, str]]:
        body = json.dumps(pagerduty(event_id=event_id, incident_id=f"P{event_id[-6:]}")).encode()
        return body, {"content-type": "application/json", "x-pagerduty-signature": pd_signature(body, PD_SECRET)}

    async def flood() -> list[int]:
        async with httpx.AsyncClient(base_url=stack.web_url, timeout=30) as http:
            requests = [signed(f"flood-{n:06d}") for n in range(LATE_QUEUEINGS_MAX)]
            answers = await asyncio.gather(*(http.post("/alerts/pagerduty", content=body, headers=headers)
                                             for body, headers in requests))
            return [answer.status_code for answer in answers]

    refused_body, refused_headers = signed("one-too-many")
    redis.freeze()
    try:
        assert asyncio.run(flood()) == [503] * LATE_QUEUEINGS_MAX
        started = time.monotonic()
        with httpx.Client(base_url=stack.web_url, timeout=PAGERDUTY_DEADLINE_SECONDS) as http:
            refused = http.post("/alerts/pagerduty", content=refused_body, headers=refused_headers)
        seconds = time.monotonic() - started
    finally:
        redis.thaw()
    # Refused at once, before anything of it waited on Redis: the refusal's own line says so (how many
    # seconds that took is the machine's load, not the bot's; the queueing budget is 3 s).
    assert refused.status_code == 503, refused.status_code
    assert f"{LATE_QUEUEINGS_MAX} alerts answered 503 are still waiting on the state store" in caplog.text, seconds
    wait_until(lambda: caplog.text.count("answered 503 was queued after all") == LATE_QUEUEINGS_MAX, timeout=30,
               what="every waiting queueing landed and said so")
    assert "was not queued either" not in caplog.text
    with httpx.Client(base_url=stack.web_url, timeout=PAGERDUTY_DEADLINE_SECONDS) as http:
        assert http.post("/alerts/pagerduty", content=refused_body, headers=refused_headers).status_code == 202
        retry_body, retry_headers = signed("flood-000007")
        assert http.post("/alerts/pagerduty", content=retry_body, headers=retry_headers).json()["duplicate"] is True
