"""bot/arq_worker_adapter.py overrides arq Worker methods that are not arq's public surface.
These tests pin what it was written against: the arq version, the shape of each method it
overrides, and — for each override — the arq behaviour that made it necessary, next to what the
adapter does instead. When arq changes one of those behaviours the test names which override to
re-read (and perhaps delete). The end-to-end outage behaviour is in tests/test_redis_failover.py
and tests/test_faults.py.

Redis is "away" here the cheapest real way: a port nothing listens on (connection refused).
"""

from __future__ import annotations

import asyncio
import inspect
import socket
from datetime import datetime, timezone

import arq.version
import pytest
from arq import cron
from arq.worker import Worker, func
from redis.exceptions import ConnectionError as RedisConnectionError

from bot import arq_worker_adapter
from bot.arq_worker_adapter import OutageTolerantWorker
from bot.redis_outage import RedisUnreachable
from bot.wiring import job_pool


async def noop(ctx: dict) -> None:
    return None


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def plain_and_adapted(**options) -> tuple[Worker, OutageTolerantWorker]:
    url = closed_port_url()
    common = dict(functions=[func(noop, name="noop")], queue_name="arq:queue:adapter-test", handle_signals=False,
                  **options)
    return (Worker(redis_pool=job_pool(url), cron_jobs=[every_second()], **common),
            OutageTolerantWorker(redis_pool=job_pool(url), cron_jobs=[every_second()], redis_url=url, startup_wait=0.3,
                                 **common))


def every_second():
    return cron(noop, second=set(range(60)), run_at_startup=False)


def test_the_adapter_was_written_against_the_installed_arq():
    assert arq.version.VERSION == arq_worker_adapter.ARQ_VERSION, (
        f"arq is {arq.version.VERSION}, bot/arq_worker_adapter.py was written against "
        f"{arq_worker_adapter.ARQ_VERSION}: re-read the Worker methods it overrides (its docstring lists why "
        "each exists), run this file, then update ARQ_VERSION")


OVERRIDDEN = {
    "main": "(self) -> None",
    "_poll_iteration": "(self) -> None",
    "run_cron": "(self, n: datetime.datetime, delay: float, num_windows: int = 2) -> None",
    "run_job": "(self, job_id: str, score: int) -> None",
    "finish_job": "(self, job_id: str, finish: bool, result_data: Optional[bytes], result_timeout_s: Optional[float], "
                  "keep_result_forever: bool, incr_score: Optional[int], keep_in_progress: Optional[float]) -> None",
    "finish_failed_job": "(self, job_id: str, result_data: Optional[bytes]) -> None",
    "handle_sig": "(self, signum: signal.Signals) -> None",
    "close": "(self) -> None",
}


@pytest.mark.parametrize("method", sorted(OVERRIDDEN))
def test_each_overridden_arq_method_keeps_the_shape_the_adapter_calls(method):
    signature = inspect.signature(getattr(Worker, method), eval_str=True)
    shown = str(signature).replace("typing.", "").replace("<Signals>", "signal.Signals")
    assert shown.replace("NoneType", "None") == OVERRIDDEN[method], f"arq's Worker.{method} changed: {shown}"
    assert method in vars(OutageTolerantWorker), f"the adapter no longer overrides {method}: drop it from this list"


async def test_arq_reads_redis_before_on_startup_so_the_adapter_waits_for_it_first():
    started: list[bool] = []

    async def on_startup(ctx: dict) -> None:
        started.append(True)

    plain, adapted = plain_and_adapted(on_startup=on_startup)
    with pytest.raises(RedisConnectionError):
        await plain.main()  # arq 0.28: log_redis_info, before on_startup
    with pytest.raises(RedisUnreachable):
        await adapted.main()  # after startup_wait, one clear line (bot/cli/errors.py)
    assert started == []


async def test_arqs_poll_loop_lets_an_outage_end_the_worker_and_the_adapter_polls_again():
    plain, adapted = plain_and_adapted()
    with pytest.raises(RedisConnectionError):
        await plain._poll_iteration()
    await adapted._poll_iteration()  # waits a backoff step, then returns for the next poll
    assert adapted._redis.away


async def test_arq_moves_a_cron_job_on_when_its_enqueue_fails_and_the_adapter_keeps_it_due():
    plain, adapted = plain_and_adapted()
    now = datetime.now(timezone.utc).astimezone()
    for worker in (plain, adapted):
        worker.cron_jobs[0].next_run = now
        with pytest.raises(RedisConnectionError):
            await worker.run_cron(now, 0.5)
    assert plain.cron_jobs[0].next_run > now  # arq 0.28: lost until its next time
    assert adapted.cron_jobs[0].next_run == now  # still due: enqueued at the first poll after the outage


async def test_arqs_bookkeeping_fails_on_an_outage_and_the_adapter_retries_it_until_shutdown():
    plain, adapted = plain_and_adapted()
    with pytest.raises(RedisConnectionError):
        await plain.finish_failed_job("job-1", b"result")
    adapted.stopping = True  # retried while running; given up (the job runs again) only at shutdown
    await adapted.finish_failed_job("job-1", b"result")
    await adapted.finish_job("job-1", True, b"result", 60.0, False, None, None)


async def test_arqs_close_stops_at_the_first_cancelled_job_and_the_adapter_drains_them_all():
    plain, adapted = plain_and_adapted()
    cleaned: list[str] = []

    async def job(name: str, clean_up_steps: int) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            for _ in range(clean_up_steps):
                await asyncio.sleep(0)
            cleaned.append(name)
            raise

    for worker in (plain, adapted):
        worker.tasks.update(quick=asyncio.create_task(job("quick", 0)), slow=asyncio.create_task(job("slow", 20)))
    await asyncio.sleep(0)
    with pytest.raises(asyncio.CancelledError):
        await plain.close()  # arq 0.28: gather raises at the first cancelled job; the rest are left behind
    assert not plain.tasks["slow"].done()
    await adapted.close()  # and Redis is away: its health key is left to expire
    assert all(task.done() for task in adapted.tasks.values())
    await asyncio.wait(list(plain.tasks.values()))
    assert sorted(cleaned) == ["quick", "quick", "slow", "slow"]
