"""infra/jobs.py: jobs declared once (`JobSpec`), enqueued through arq's own `enqueue_job`, and
the one adapter (infra/arq_enqueue_adapter.py) that must write exactly what arq writes, because
arq's own worker is what runs the jobs."""

from __future__ import annotations

import ast
import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import arq.version
import pytest
from arq.connections import RedisSettings
from arq.jobs import Job, JobStatus
from arq.worker import Worker, func

from bot.wiring import arq_pool
from infra import arq_enqueue_adapter
from infra.jobs import JobOutcome, JobQueue, JobSpec
from infra.state.dedupe import Dedupe

QUEUE = "arq:queue:test-jobs"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Greeting:
    team: str = "T"
    text: str = ""
    files: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Count:
    n: int = 0


GREET = JobSpec("answer_mention", Greeting)
COUNT = JobSpec("f", Count)


@pytest.fixture
async def pool(redis_url):
    arq = await arq_pool(redis_url)
    yield arq
    await arq.aclose()


async def test_enqueued_job_reads_back_through_arq_as_queued(pool):
    queue = JobQueue(pool, queue_name=QUEUE)
    before = int(time.time() * 1000)
    assert await queue.enqueue(GREET, Greeting(team="T", text="hi", files=[{"id": "F1"}]), job_id="mention:T:C:1.0")
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
    assert await queue.enqueue(COUNT, Count(1), job_id="once")
    assert not await queue.enqueue(COUNT, Count(2), job_id="once")
    assert (await Job("once", pool, _queue_name=QUEUE).info()).kwargs == {"n": 1}
    await pool.delete(b"arq:job:once")
    await pool.set(b"arq:result:once", b"x")  # arq keeps a finished job's result under this key
    assert not await queue.enqueue(COUNT, Count(3), job_id="once")
    assert await queue.pending_count() == 1


async def test_deferred_jobs_are_scored_at_their_start_time(pool):
    queue = JobQueue(pool, queue_name=QUEUE)
    at = datetime.now(timezone.utc) + timedelta(hours=2)
    assert await queue.enqueue(COUNT, Count(), job_id="until", defer_until=at)
    assert await queue.enqueue(COUNT, Count(), job_id="by", defer_by=timedelta(minutes=10))
    scores = dict(await pool.zrange(QUEUE, 0, -1, withscores=True))
    assert scores[b"until"] == pytest.approx(at.timestamp() * 1000, abs=1)
    assert scores[b"by"] == pytest.approx(time.time() * 1000 + 600_000, abs=5_000)
    # arq lets a deferred job live until its start plus its usual expiry.
    assert await pool.pttl(b"arq:job:until") > 2 * 3600 * 1000
    with pytest.raises(ValueError):
        await queue.enqueue(COUNT, Count(), job_id="both", defer_until=at, defer_by=timedelta(minutes=1))


async def test_arqs_worker_runs_what_we_enqueue(pool, redis_url):
    ran: list[Greeting] = []

    async def record(ctx: dict, job: Greeting) -> JobOutcome:
        ran.append(job)
        return JobOutcome.ok("done")

    bound = GREET.bind(record)

    async def run(ctx: dict, **kwargs) -> str:  # what bot/worker.py's counted() does around a bound job
        return await bound(ctx, **kwargs)

    queue = JobQueue(pool, queue_name=QUEUE)
    assert await queue.enqueue(GREET, Greeting(team="T1", text="hi"), job_id="run-me")
    worker = Worker(functions=[func(run, name=GREET.name)], redis_settings=RedisSettings.from_dsn(redis_url),
                    queue_name=QUEUE, burst=True, poll_delay=0.01, handle_signals=False)
    try:
        await worker.main()
    finally:
        await worker.close()
    assert ran == [Greeting(team="T1", text="hi")]
    assert await Job("run-me", pool, _queue_name=QUEUE).result(timeout=5) == "done"
    assert not await queue.enqueue(GREET, Greeting(), job_id="run-me")  # its kept result still dedupes


async def test_first_delivery_markers_and_the_job_are_one_step(pool):
    queue = JobQueue(pool, queue_name=QUEUE)
    event, message = Dedupe.marker("event", "Ev1"), Dedupe.marker("message", "T:C:1.0")
    first = dict(job_id="mention:T:C:1.0", markers=[event, message], marker_ttl=3600)
    assert await queue.enqueue_first_delivery(GREET, Greeting(text="hi"), **first) == 0
    assert await pool.exists(event, message) == 2 and 0 < await pool.ttl(event) <= 3600
    assert (await Job("mention:T:C:1.0", pool, _queue_name=QUEUE).info()).kwargs == {"team": "T", "text": "hi", "files": []}

    # Slack's retry repeats the event id; an edit repeats the message under a new event id.
    assert await queue.enqueue_first_delivery(GREET, Greeting(text="hi"), **first) == 1
    edit = dict(first, markers=[Dedupe.marker("event", "Ev2"), message])
    assert await queue.enqueue_first_delivery(GREET, Greeting(text="hi (edited)"), **edit) == 2
    assert await pool.exists(Dedupe.marker("event", "Ev2")), "every marker is set, so a retry of the edit is caught too"
    assert await queue.pending_count() == 1
    assert (await Job("mention:T:C:1.0", pool, _queue_name=QUEUE).info()).kwargs["text"] == "hi"

    # Markers lost (a Redis failover) still cannot queue the answer twice: the job id can't.
    await pool.delete(event, message, Dedupe.marker("event", "Ev2"))
    assert await queue.enqueue_first_delivery(GREET, Greeting(text="hi"), **first) == -1
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
        assert await queue.enqueue(GREET, Greeting(), job_id=job_id)
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


async def test_a_job_whose_start_record_redis_missed_is_recorded_by_the_next_beat(pool, redis_url):
    # on_job_start's record can miss Redis (an outage of a second; it is not retried there): the
    # job's worker then dying would leave it to arq's 5-minute in-progress expiry. Each beat records
    # the jobs the worker is running, as arq's own Worker.job_tasks lists them.
    import asyncio

    from arq.constants import in_progress_key_prefix

    from bot.orphaned_jobs import JobOwnership
    from infra.state import keys

    dead, live = JobOwnership(QUEUE, owner_ttl_seconds=320), JobOwnership(QUEUE, owner_ttl_seconds=320)
    started, finish = asyncio.Event(), asyncio.Event()

    async def slow(ctx: dict, **kwargs) -> str:
        started.set()
        await finish.wait()
        return "done"

    queue = JobQueue(pool, queue_name=QUEUE)
    assert await queue.enqueue(GREET, Greeting(), job_id="job:unrecorded")
    worker = Worker(functions=[func(slow, name=GREET.name)], redis_settings=RedisSettings.from_dsn(redis_url),
                    queue_name=QUEUE, burst=True, poll_delay=0.01, handle_signals=False)
    running = asyncio.create_task(worker.main())
    try:
        await asyncio.wait_for(started.wait(), 10)
        assert not await pool.exists(keys.job_owner("job:unrecorded"))  # no on_job_start here: the record missed
        await dead.beat(pool, running=[job_id for job_id, task in worker.job_tasks.items() if not task.done()])
        assert await pool.get(keys.job_owner("job:unrecorded")) == dead.worker_id.encode()

        await pool.delete(dead.alive_key())  # the worker died; its liveness key expired
        assert (await live.beat(pool)).jobs == ["job:unrecorded"]
        assert not await pool.exists(in_progress_key_prefix + "job:unrecorded")
    finally:
        finish.set()
        await asyncio.wait_for(running, 10)
        await worker.close()


async def test_a_try_that_ended_leaves_no_owner_record_to_mislead_the_sweep(pool, tmp_path, monkeypatch):
    # A lease job retried (its lock busy or lost, a 503) runs its next try on another worker. Had the
    # first try's record stayed, a sweep after that worker's death would find it on the next try's
    # in-progress mark in the moment before the new runner's own record (or a beat later, if Redis
    # missed it), and release a job a live worker runs for a second worker to start beside it.
    from arq.constants import in_progress_key_prefix

    from bot.orphaned_jobs import JobOwnership
    from bot.settings import Settings
    from bot.worker import build_worker
    from infra.state import keys

    monkeypatch.chdir(tmp_path)  # no stray tpu.env
    settings = Settings.load(tmp_path / "none.env", redis_url="redis://127.0.0.1:1/0")
    first = build_worker(settings, redis_url="redis://127.0.0.1:1/0", handle_signals=False)  # its hooks only
    ctx = {"redis": pool, "job_id": "job:retried"}
    queue = JobQueue(pool, queue_name=QUEUE)
    assert await queue.enqueue(GREET, Greeting(), job_id="job:retried")
    live = JobOwnership(QUEUE, owner_ttl_seconds=320)
    await live.beat(pool)

    assert first.on_job_start is not None and first.after_job_end is not None  # the hooks arq runs
    await first.on_job_start(ctx)
    first_id = (await pool.get(keys.job_owner("job:retried"))).decode()
    await first.after_job_end(ctx)  # the try ended with a Retry: re-queued
    assert not await pool.exists(keys.job_owner("job:retried"))

    # The first worker stops (its liveness key goes at once); the second starts the next try.
    await pool.delete(keys.worker_alive(first_id))
    await pool.psetex(in_progress_key_prefix + "job:retried", 310_000, b"1")  # arq's mark, before on_job_start
    assert (await live.beat(pool)).jobs == []
    assert await pool.exists(in_progress_key_prefix + "job:retried")

    # A record another worker wrote since is not the ending worker's to drop.
    await pool.set(keys.job_owner("job:retried"), live.worker_id)
    await first.after_job_end(ctx)
    assert await pool.get(keys.job_owner("job:retried")) == live.worker_id.encode()


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


# --- job declarations -------------------------------------------------------------------------


def declared_job_names() -> dict[str, str]:
    """Every `JobSpec("name", …)` written at module level in the bot's packages: name → module."""
    declared: dict[str, str] = {}
    for package in ("bot", "handlers", "agent", "infra"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.parse(path.read_text()).body:
                value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
                if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "JobSpec"
                        and value.args and isinstance(value.args[0], ast.Constant)):
                    name = value.args[0].value
                    assert name not in declared, f"job {name!r} is declared twice: {declared[name]} and {path}"
                    declared[name] = str(path.relative_to(ROOT))
    return declared


def test_every_declared_job_has_a_worker_function_and_every_worker_function_a_declaration(tmp_path, monkeypatch):
    from bot.settings import Settings
    from bot.worker import JOBS, build_worker

    declared = declared_job_names()
    assert len(declared) >= 10, declared  # the scan sees the declarations (answer_mention … check_idle)
    bound = [job.spec.name for job in JOBS]
    assert sorted(bound) == sorted(set(bound)), "a job is bound twice"
    assert set(bound) == set(declared), (f"declared, no function: {sorted(set(declared) - set(bound))}; "
                                         f"bound, not declared: {sorted(set(bound) - set(declared))}")
    monkeypatch.chdir(tmp_path)  # no stray tpu.env
    settings = Settings.load(tmp_path / "none.env", redis_url="redis://127.0.0.1:1/0")
    worker = build_worker(settings, redis_url="redis://127.0.0.1:1/0", handle_signals=False)
    assert {name for name in worker.functions if not name.startswith("cron:")} == set(declared)
    # Each is registered with its spec's timeout and tries, and every spec keeps what all jobs shared
    # before specs declared them (the worker's JOB_TIMEOUT and 20 tries) but the teardown, whose one try
    # outlasts its own wait for the delete (Policy.teardown_wait, 5 minutes, as long as JOB_TIMEOUT).
    from agent.lease.lifecycle import TEARDOWN_JOB
    from agent.policy import Policy

    for job in JOBS:
        function = worker.functions[job.spec.name]
        timeout = (Policy.teardown_wait.total_seconds() + 60) if job.spec is TEARDOWN_JOB else None
        assert (function.timeout_s, function.max_tries) == (timeout, 20), job.spec
    assert worker.job_timeout_s == settings.job_timeout.total_seconds()


async def test_a_spec_gives_its_job_its_own_timeout_and_tries_on_arqs_worker(pool, redis_url):
    from types import SimpleNamespace

    from arq import Retry

    from bot.arq_worker_adapter import WorkerContext, keep_worker_context
    from bot.worker import registered
    from infra.metrics import Metrics

    tries: list[int] = []

    async def again(context: WorkerContext, job: Count) -> JobOutcome:
        tries.append(context.job_try)
        raise Retry(defer=0)

    async def slow(context: WorkerContext, job: Greeting) -> JobOutcome:
        await asyncio.sleep(5)
        return JobOutcome.ok()

    async def startup(ctx: dict) -> None:
        keep_worker_context(ctx, WorkerContext(services=SimpleNamespace(metrics=Metrics()), slack=None, incidents=None))

    twice, quick = JobSpec("again", Count, max_tries=2), JobSpec("slow", Greeting, timeout=timedelta(seconds=0.3))
    queue = JobQueue(pool, queue_name=QUEUE)
    assert await queue.enqueue(twice, Count(), job_id="again") and await queue.enqueue(quick, Greeting(), job_id="slow")
    worker = Worker(functions=[registered(twice.bind(again)), registered(quick.bind(slow))],
                    redis_settings=RedisSettings.from_dsn(redis_url), queue_name=QUEUE, burst=True, poll_delay=0.01,
                    handle_signals=False, on_startup=startup, job_timeout=60, max_tries=20)
    try:
        await worker.main()
    finally:
        await worker.close()
    assert tries == [1, 2]  # the spec's two tries, not the worker's twenty
    assert await queue.failure("again") == "JobExecutionFailed: max 2 retries exceeded"
    assert await queue.failure("slow") == "it ran past JOB_TIMEOUT"  # the spec's 0.3 s, not the worker's minute


def test_a_job_takes_only_its_own_frozen_arguments():
    @dataclass
    class Loose:
        n: int = 0

    with pytest.raises(TypeError, match="frozen dataclass"):
        JobSpec("loose", Loose)
    with pytest.raises(TypeError, match="takes Count, not Greeting"):
        COUNT.to_kwargs(Greeting())  # type: ignore[arg-type]  # what mypy refuses, refused at run time too
    assert COUNT.from_kwargs(COUNT.to_kwargs(Count(3))) == Count(3)


# --- the enqueue adapter: it must write what arq's enqueue_job writes ---------------------------


def test_the_enqueue_adapter_was_written_against_the_installed_arq():
    assert arq.version.VERSION == arq_enqueue_adapter.ARQ_VERSION, (
        f"arq is {arq.version.VERSION}, infra/arq_enqueue_adapter.py was written against "
        f"{arq_enqueue_adapter.ARQ_VERSION}: re-read arq's ArqRedis.enqueue_job, check the adapter still writes "
        "what it writes (the tests below), then update ARQ_VERSION")


async def test_the_adapter_writes_what_arqs_enqueue_job_writes(pool):
    kwargs = {"team": "T", "text": "hi", "files": [{"id": "F1"}]}
    assert await pool.enqueue_job("answer_mention", _job_id="by-arq", _queue_name=QUEUE, **kwargs) is not None
    assert await arq_enqueue_adapter.enqueue_behind_markers(pool, QUEUE, "answer_mention", kwargs, job_id="by-us",
                                                            markers=["seen:x"], marker_ttl=60) == 0
    theirs = await Job("by-arq", pool, _queue_name=QUEUE).info()
    ours = await Job("by-us", pool, _queue_name=QUEUE).info()
    assert theirs is not None and ours is not None
    for attribute in ("function", "args", "kwargs", "job_try"):
        assert getattr(ours, attribute) == getattr(theirs, attribute), attribute
    assert abs(ours.score - theirs.score) < 5_000 and abs((ours.enqueue_time - theirs.enqueue_time).total_seconds()) < 5
    assert abs(await pool.pttl(b"arq:job:by-us") - await pool.pttl(b"arq:job:by-arq")) < 5_000
    # Each refuses the other's job id, and a kept result, the same way.
    assert await pool.enqueue_job("answer_mention", _job_id="by-us", _queue_name=QUEUE) is None
    assert await arq_enqueue_adapter.enqueue_behind_markers(pool, QUEUE, "answer_mention", {}, job_id="by-arq",
                                                            markers=["seen:y"], marker_ttl=60) == -1
    await pool.delete(b"arq:job:by-arq")
    await pool.set(b"arq:result:by-arq", b"x")
    assert await arq_enqueue_adapter.enqueue_behind_markers(pool, QUEUE, "answer_mention", {}, job_id="by-arq",
                                                            markers=["seen:z"], marker_ttl=60) == -1
    assert await pool.enqueue_job("answer_mention", _job_id="by-arq", _queue_name=QUEUE) is None
