"""infra/jobs.py enqueues in one round trip; what it writes must be exactly what arq writes,
because arq's own worker is what runs the jobs."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from arq.connections import RedisSettings
from arq.jobs import Job, JobStatus
from arq.worker import Worker, func

from bot.wiring import arq_pool
from infra.jobs import JobQueue
from infra.state.dedupe import Dedupe

QUEUE = "arq:queue:test-jobs"


@pytest.fixture
async def pool(redis_url):
    arq = await arq_pool(redis_url)
    yield arq
    await arq.aclose()


async def test_enqueued_job_reads_back_through_arq_as_queued(pool):
    queue = JobQueue(pool, queue_name=QUEUE)
    before = int(time.time() * 1000)
    assert await queue.enqueue("answer_mention", job_id="mention:T:C:1.0", team="T", text="hi", files=[{"id": "F1"}])
    job = Job("mention:T:C:1.0", pool, _queue_name=QUEUE)
    info = await job.info()
    assert info.function == "answer_mention" and info.args == ()
    assert info.kwargs == {"team": "T", "text": "hi", "files": [{"id": "F1"}]}
    assert info.job_try is None and before <= info.score <= int(time.time() * 1000)
    assert await job.status() is JobStatus.queued
    assert await queue.exists("mention:T:C:1.0") and await queue.pending_count() == 1
    ttl_ms = await pool.pttl(b"arq:job:mention:T:C:1.0")
    assert 0 < ttl_ms <= pool.expires_extra_ms


async def test_same_id_is_queued_once_even_after_its_result_is_kept(pool):
    queue = JobQueue(pool, queue_name=QUEUE)
    assert await queue.enqueue("f", job_id="once", n=1)
    assert not await queue.enqueue("f", job_id="once", n=2)
    assert (await Job("once", pool, _queue_name=QUEUE).info()).kwargs == {"n": 1}
    await pool.delete(b"arq:job:once")
    await pool.set(b"arq:result:once", b"x")  # arq keeps a finished job's result under this key
    assert not await queue.enqueue("f", job_id="once", n=3)
    assert await queue.pending_count() == 1


async def test_deferred_jobs_are_scored_at_their_start_time(pool):
    queue = JobQueue(pool, queue_name=QUEUE)
    at = datetime.now(timezone.utc) + timedelta(hours=2)
    assert await queue.enqueue("f", job_id="until", defer_until=at)
    assert await queue.enqueue("f", job_id="by", defer_by=timedelta(minutes=10))
    scores = dict(await pool.zrange(QUEUE, 0, -1, withscores=True))
    assert scores[b"until"] == pytest.approx(at.timestamp() * 1000, abs=1)
    assert scores[b"by"] == pytest.approx(time.time() * 1000 + 600_000, abs=5_000)
    # arq lets a deferred job live until its start plus its usual expiry.
    assert await pool.pttl(b"arq:job:until") > 2 * 3600 * 1000
    with pytest.raises(ValueError):
        await queue.enqueue("f", job_id="both", defer_until=at, defer_by=timedelta(minutes=1))


async def test_arqs_worker_runs_what_we_enqueue(pool, redis_url):
    ran: list[dict] = []

    async def record(ctx, **kwargs):
        ran.append(kwargs)
        return "done"

    queue = JobQueue(pool, queue_name=QUEUE)
    assert await queue.enqueue("record", job_id="run-me", lease_id="L1", user="U1")
    worker = Worker(functions=[func(record, name="record")], redis_settings=RedisSettings.from_dsn(redis_url), queue_name=QUEUE,
                    burst=True, poll_delay=0.01, handle_signals=False)
    try:
        await worker.main()
    finally:
        await worker.close()
    assert ran == [{"lease_id": "L1", "user": "U1"}]
    assert await Job("run-me", pool, _queue_name=QUEUE).result(timeout=5) == "done"
    assert not await queue.enqueue("record", job_id="run-me")  # its kept result still dedupes


async def test_first_delivery_markers_and_the_job_are_one_step(pool):
    queue = JobQueue(pool, queue_name=QUEUE)
    event, message = Dedupe.marker("event", "Ev1"), Dedupe.marker("message", "T:C:1.0")
    first = dict(job_id="mention:T:C:1.0", markers=[event, message], marker_ttl=3600)
    assert await queue.enqueue_first_delivery("answer_mention", text="hi", **first) == 0
    assert await pool.exists(event, message) == 2 and 0 < await pool.ttl(event) <= 3600
    assert (await Job("mention:T:C:1.0", pool, _queue_name=QUEUE).info()).kwargs == {"text": "hi"}

    # Slack's retry repeats the event id; an edit repeats the message under a new event id.
    assert await queue.enqueue_first_delivery("answer_mention", text="hi", **first) == 1
    edit = dict(first, markers=[Dedupe.marker("event", "Ev2"), message])
    assert await queue.enqueue_first_delivery("answer_mention", text="hi (edited)", **edit) == 2
    assert await pool.exists(Dedupe.marker("event", "Ev2")), "every marker is set, so a retry of the edit is caught too"
    assert await queue.pending_count() == 1
    assert (await Job("mention:T:C:1.0", pool, _queue_name=QUEUE).info()).kwargs == {"text": "hi"}

    # Markers lost (a Redis failover) still cannot queue the answer twice: the job id can't.
    await pool.delete(event, message, Dedupe.marker("event", "Ev2"))
    assert await queue.enqueue_first_delivery("answer_mention", text="hi", **first) == -1
    assert await queue.pending_count() == 1


async def test_only_a_dead_workers_unfinished_job_is_released_for_another_try(pool):
    # arq's in-progress key of a SIGKILLed worker's job lasts the job timeout + 10 s; the job stays
    # queued. The heartbeat's sweep (bot/orphaned_jobs.py) frees exactly the dead owner's unfinished jobs.
    from arq.constants import in_progress_key_prefix

    from bot.orphaned_jobs import JobOwnership

    queue = JobQueue(pool, queue_name=QUEUE)
    dead, live = JobOwnership(QUEUE, owner_ttl_seconds=320), JobOwnership(QUEUE, owner_ttl_seconds=320)
    await dead.beat(pool)
    await live.beat(pool)
    for job_id, owner in (("job:dead", dead), ("job:live", live), ("job:dead-finished", dead)):
        assert await queue.enqueue("answer_mention", job_id=job_id)
        await pool.psetex(in_progress_key_prefix + job_id, 310_000, b"1")
        await owner.job_started(pool, job_id)
    await pool.zrem(QUEUE, "job:dead-finished")  # finished: its in-progress key is arq's cron guard
    assert (await live.beat(pool)).jobs == []  # the dead worker's liveness key has not expired yet

    await pool.delete(dead.alive_key())  # what its TTL does 15 s after the SIGKILL
    assert (await live.beat(pool)).jobs == ["job:dead"]
    assert not await pool.exists(in_progress_key_prefix + "job:dead")
    assert await pool.exists(in_progress_key_prefix + "job:live")
    assert await pool.exists(in_progress_key_prefix + "job:dead-finished")
    assert (await live.beat(pool)).jobs == []


async def test_only_a_dead_workers_channel_locks_are_released_by_the_heartbeat(pool):
    # A SIGKILLed worker's channel lock would hold its released job off for LOCK_TTL (60 s); the
    # heartbeat frees the locks whose token names a worker whose liveness key has expired, and
    # no other: a live worker's lock and a plain-token lock (web process, CLI) stay.
    from bot.orphaned_jobs import JobOwnership
    from infra.state.locks import ChannelLocks

    dead, live = JobOwnership(QUEUE, owner_ttl_seconds=320), JobOwnership(QUEUE, owner_ttl_seconds=320)
    await dead.beat(pool)
    await live.beat(pool)
    dead_locks = ChannelLocks(pool, ttl_ms=60_000, owner=dead.worker_id)
    live_locks = ChannelLocks(pool, ttl_ms=60_000, owner=live.worker_id)
    plain_locks = ChannelLocks(pool, ttl_ms=60_000)
    dead_token = await dead_locks.acquire("T1", "C-dead")
    live_token = await live_locks.acquire("T1", "C-live")
    plain_token = await plain_locks.acquire("T1", "C-plain")
    reconciler_token = await dead_locks.acquire("tpubot", "reconciler", ttl_ms=300_000)
    assert dead_token and dead_token.startswith(dead.worker_id + ".")
    assert live_token and plain_token and reconciler_token and "." not in plain_token
    assert (await live.beat(pool)).locks == []  # the dead worker's liveness key has not expired yet

    await pool.delete(dead.alive_key())  # what its TTL does 15 s after the SIGKILL
    swept = await live.beat(pool)
    assert sorted(swept.locks) == ["tpubot:lock:T1:C-dead", "tpubot:lock:tpubot:reconciler"]
    assert await live_locks.acquire("T1", "C-dead") is not None  # the channel is free at once
    assert await live_locks.holder_token("T1", "C-live") == live_token
    assert await plain_locks.holder_token("T1", "C-plain") == plain_token
    assert 50_000 < await pool.pttl("tpubot:lock:T1:C-plain") <= 60_000  # nothing shortened either

    # The live holder still extends and releases its own lock; the dead one's token is spent.
    assert await live_locks.extend("T1", "C-live", live_token, ttl_ms=90_000)
    assert not await dead_locks.release("T1", "C-dead", dead_token)
    assert (await live.beat(pool)).locks == []
    assert await live_locks.release("T1", "C-live", live_token)
    assert await plain_locks.release("T1", "C-plain", plain_token)
