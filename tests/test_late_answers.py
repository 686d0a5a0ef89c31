"""Work acked with "the result follows": delivered when it ends, said to have failed when it
raises, and finished before a stopping web process closes its Redis pool."""

from __future__ import annotations

import asyncio

from handlers.late_answers import LateAnswers, drain_late_answers


async def test_overrun_work_is_delivered_when_it_ends_and_a_stop_waits_for_it():
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
    drain = asyncio.create_task(drain_late_answers(timeout=10))
    await asyncio.sleep(0)  # let the drain start waiting before the work may end
    assert not drain.done()
    go.set()
    assert await drain == 0 and delivered == ["the status card"] and answers.pending == 0


async def test_overrun_work_that_raises_tells_the_person_it_failed():
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
    assert await drain_late_answers(timeout=10) == 0
    assert told == ["failed"]


async def test_a_stop_gives_up_on_work_still_running_at_its_timeout():
    never = asyncio.Event()

    async def work() -> str:
        await never.wait()
        return ""

    async def deliver(result: str) -> None:
        return None

    answers: LateAnswers[str] = LateAnswers(budget_seconds=0.01)
    await answers.within_budget(work(), deliver)
    assert await drain_late_answers(timeout=0.05) == 1
    never.set()
    assert await drain_late_answers(timeout=10) == 0


async def test_the_budget_counts_from_when_the_request_arrived():
    """Time the web process spent before the listener (the body, the signature, bolt) is not given again."""
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
    assert await drain_late_answers(timeout=10) == 0


async def test_overrun_work_past_its_limit_says_full_until_some_of_it_ends():
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
    assert await drain_late_answers(timeout=10) == 0
    assert not answers.full and not LateAnswers(budget_seconds=0.01).full  # no limit: never full
