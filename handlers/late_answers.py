"""Answers that would outlast Slack's 3-second ack.

A slash command's work (a lease claim, a status read) normally takes milliseconds and its answer
is the ack itself. While the state store is slow — a failover, a primary paused for seconds — each
Redis call can wait up to its socket timeout, and the ack would arrive after Slack has shown the
user "dispatch_failed". The work is never cancelled to meet the deadline (a claim written without
its job, cut halfway, is worse than a late answer): the ack says the answer follows, and the answer
goes to the command's response_url when the work has finished.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextvars import ContextVar
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Slack allows 3 s for the whole round trip; the signature check, bolt and the network use
# milliseconds of it, so the work gets 2.5 s before the ack goes out without it.
ACK_BUDGET_SECONDS = 2.5
# When the web process received the request being answered (time.perf_counter()): the budget
# counts from there, so the body read, the signature check and bolt's own work come out of it.
REQUEST_STARTED: ContextVar[float | None] = ContextVar("tpubot_request_started", default=None)

STATE_STORE_DOWN = ":warning: The state store is unavailable, so nothing changed. Try again in a minute."
# A write the client gave up waiting for may still be applied when the server catches up.
STATE_STORE_SLOW = (":warning: The state store did not answer in time, so this may or may not have "
                    "taken effect. Check `/tpu status` in a minute before trying again.")


def state_store_notice(error: RedisError) -> str:
    """What a person is told when the state store failed their command or click: a write the
    client stopped waiting for may still land, so a timeout never says "nothing changed"."""
    return STATE_STORE_SLOW if isinstance(error, RedisTimeoutError) else STATE_STORE_DOWN


# What a person told "the result follows" hears when the work then fails.
LATE_FAILURE = (":x: This failed after I said the result would follow; it may or may not have taken effect. "
                "Check `/tpu status` before trying again.")
# A stopping process waits this long for acked work (Redis's own timeout is 10 s, plus the post).
DRAIN_SECONDS = 15.0


async def finish_acked_work(started_before: set[asyncio.Task], timeout: float = DRAIN_SECONDS) -> int:
    """Wait for what acked requests left running to finish: late answers and bolt's lazy listeners
    (a click's reply, the Home tab's publish), every task started since `started_before` was taken
    at start-up. A stopping process calls it before it closes its Redis pool under that work.
    The number still running at `timeout`."""
    left = asyncio.all_tasks() - started_before - {asyncio.current_task()}
    if not left:
        return 0
    log.info("waiting for %d pieces of acked work to finish before stopping", len(left))
    _, running = await asyncio.wait(left, timeout=timeout)
    for task in running:
        log.warning("acked work was still running at shutdown: %s", task.get_coro())
    return len(running)


class LateAnswers(Generic[T]):
    """Runs work against the ack budget; work that overruns it is delivered later, once it ends."""

    def __init__(self, budget_seconds: float = ACK_BUDGET_SECONDS, floor_seconds: float = 0.0,
                 max_pending: int | None = None) -> None:
        """`floor_seconds`: what the work gets however much of the budget the request spent before
        it; `max_pending`: how much overrun work may be waiting at once (`full` says when the
        caller should refuse new work instead of starting it)."""
        self.budget_seconds, self.floor_seconds, self.max_pending = budget_seconds, floor_seconds, max_pending
        # Strong references: the event loop keeps only weak ones to running tasks.
        self._deliveries: set[asyncio.Task[None]] = set()

    async def within_budget(self, work: Awaitable[T], deliver: Callable[[T], Awaitable[None]],
                            failed: Callable[[], Awaitable[None]] | None = None) -> T | None:
        """The work's result when it finishes within the budget; otherwise None, and `deliver`
        gets the result when the work ends — or `failed` is called if the work raises, so a person
        told "the result follows" is told it will not."""
        task = asyncio.ensure_future(work)
        started = REQUEST_STARTED.get()
        spent = time.perf_counter() - started if started is not None else 0.0
        done, _ = await asyncio.wait({task}, timeout=max(self.floor_seconds, self.budget_seconds - spent))
        if done:
            return task.result()
        delivery = asyncio.create_task(self._deliver_when_done(task, deliver, failed))
        self._deliveries.add(delivery)
        delivery.add_done_callback(self._deliveries.discard)
        return None

    @property
    def pending(self) -> int:
        return len(self._deliveries)

    @property
    def full(self) -> bool:
        return self.max_pending is not None and len(self._deliveries) >= self.max_pending

    @staticmethod
    async def _deliver_when_done(task: asyncio.Future[T], deliver: Callable[[T], Awaitable[None]],
                                 failed: Callable[[], Awaitable[None]] | None) -> None:
        try:
            result = await task
        except Exception:
            log.exception("acked work failed after its ack")
            if failed is not None:
                try:
                    await failed()
                except Exception:
                    log.exception("could not say that acked work failed")
            return
        try:
            await deliver(result)
        except Exception:  # a late answer that cannot be posted is logged; the work itself is done
            log.exception("could not deliver a late answer")


async def within_ack_budget(late: LateAnswers[T], work: Awaitable[T], landed_late: Callable[[T], Awaitable[None]], *,
                            not_done: str) -> T:
    """An event listener's durable part, against the ack budget. Past it, RedisTimeoutError: Slack
    gets a 500 and sends the event again, never an ack it has already given up on; the work goes
    on, and `landed_late` hears when it ends (the retry then finds it done)."""
    outcome = await late.within_budget(work, landed_late)
    if outcome is None:
        raise RedisTimeoutError(f"{not_done} within the ack budget")
    return outcome
