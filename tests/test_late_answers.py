"""Work acked with "the result follows": delivered when it ends, said to have failed when it
raises, and finished before a stopping web process closes its Redis pool."""

from __future__ import annotations

import asyncio

from handlers.late_answers import LateAnswers, finish_acked_work


async def test_overrun_work_is_delivered_when_it_ends_and_a_stop_waits_for_it():
    started_before = asyncio.all_tasks()  # the process's tasks at start-up
    go = asyncio.Event()
    delivered: list[str] = []

    async def work() -> str:
        await go.wait()
        return "the status card"

    async def deliver(result: str) -> None:
        delivered.append(result)

    answers: LateAnswers[str] = LateAnswers(budget_seconds=0.01)
    assert await answers.within_budget(work(), deliver) is None  # acked without it
    assert answers.pending == 1
    drain = asyncio.create_task(finish_acked_work(started_before, timeout=10))
    await asyncio.sleep(0)  # let the drain start waiting before the work may end
    assert not drain.done()
    go.set()
    assert await drain == 0 and delivered == ["the status card"] and answers.pending == 0


async def test_overrun_work_that_raises_tells_the_person_it_failed():
    started_before = asyncio.all_tasks()  # the process's tasks at start-up
    told: list[str] = []
    go = asyncio.Event()

    async def work() -> str:
        await go.wait()
        raise RuntimeError("the TPU API said no")

    async def deliver(result: str) -> None:
        told.append("delivered " + result)

    async def failed() -> None:
        told.append("failed")

    answers: LateAnswers[str] = LateAnswers(budget_seconds=0.01)
    assert await answers.within_budget(work(), deliver, failed) is None
    go.set()  # it fails only after its ack went out
    assert await finish_acked_work(started_before, timeout=10) == 0
    assert told == ["failed"]


async def test_a_stop_gives_up_on_work_still_running_at_its_timeout():
    started_before = asyncio.all_tasks()  # the process's tasks at start-up
    never = asyncio.Event()

    async def work() -> str:
        await never.wait()
        return ""

    async def deliver(result: str) -> None:
        return None

    answers: LateAnswers[str] = LateAnswers(budget_seconds=0.01)
    await answers.within_budget(work(), deliver)
    assert await finish_acked_work(started_before, timeout=0.05) == 2  # the work, and its delivery waiting on it
    never.set()
    assert await finish_acked_work(started_before, timeout=10) == 0


async def test_the_budget_counts_from_when_the_request_arrived():
    """Time the web process spent before the listener (the body, the signature, bolt) is not given again."""
    started_before = asyncio.all_tasks()  # the process's tasks at start-up
    import time

    from handlers.late_answers import REQUEST_STARTED

    go = asyncio.Event()

    async def work() -> str:
        await go.wait()
        return "late"

    async def deliver(result: str) -> None:
        return None

    answers: LateAnswers[str] = LateAnswers(budget_seconds=30)
    token = REQUEST_STARTED.set(time.perf_counter() - 30)  # the whole budget already spent
    try:
        started = time.perf_counter()
        assert await answers.within_budget(work(), deliver) is None
        assert time.perf_counter() - started < 5  # acked at once, not 30 s later
    finally:
        REQUEST_STARTED.reset(token)
        go.set()
    assert await finish_acked_work(started_before, timeout=10) == 0


async def test_overrun_work_past_its_limit_says_full_until_some_of_it_ends():
    started_before = asyncio.all_tasks()  # the process's tasks at start-up
    go = asyncio.Event()

    async def work() -> str:
        await go.wait()
        return "queued"

    async def deliver(result: str) -> None:
        return None

    answers: LateAnswers[str] = LateAnswers(budget_seconds=0.01, max_pending=2)
    assert not answers.full
    await answers.within_budget(work(), deliver)
    assert not answers.full
    await answers.within_budget(work(), deliver)
    assert answers.full and answers.pending == 2
    go.set()
    assert await finish_acked_work(started_before, timeout=10) == 0
    assert not answers.full and not LateAnswers(budget_seconds=0.01).full  # no limit: never full


async def test_a_stop_waits_for_any_task_started_since_start_up_and_not_for_older_ones():
    """bolt's lazy listeners are plain tasks, as are a process's own long-lived ones from before."""
    forever = asyncio.Event()
    long_lived = asyncio.create_task(forever.wait())  # started with the process: not acked work
    started_before = asyncio.all_tasks()
    go = asyncio.Event()
    replied: list[str] = []

    async def lazy_reply() -> None:
        await go.wait()
        replied.append("reply")

    asyncio.ensure_future(lazy_reply())
    drain = asyncio.create_task(finish_acked_work(started_before, timeout=10))
    await asyncio.sleep(0)
    assert not drain.done()
    go.set()
    assert await drain == 0 and replied == ["reply"] and not long_lived.done()
    forever.set()
