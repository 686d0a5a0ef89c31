"""Waiting on a condition with a timeout (never a fixed sleep) for tests of asynchronous work."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class _Deadline:
    def __init__(self, timeout: float, what: str | Callable[[], str]) -> None:
        self._end = time.monotonic() + timeout
        self._timeout, self._what = timeout, what

    def check(self, value: object) -> None:
        if time.monotonic() >= self._end:
            # A callable `what` is read now: what it reports (a log, the state so far) is as of the timeout.
            what = self._what() if callable(self._what) else self._what
            raise AssertionError(f"{what} not met within {self._timeout}s (last value: {value!r})"[:2500])


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
               what: str | Callable[[], str] = "condition", pause: Callable[[float], None] = time.sleep) -> T:
    """Poll `predicate` until it returns something truthy, and return that; fail after `timeout`.
    Between polls, `pause(interval)`: a sleep, or the time the work waited on runs in (in_process_bot)."""
    deadline = _Deadline(timeout, what)
    while not (value := predicate()):
        deadline.check(value)
        pause(interval)
    return value


async def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
                   what: str | Callable[[], str] = "condition") -> T:
    """`wait_until` for async tests: the event loop keeps running while it polls, and
    `predicate` may return an awaitable (a Redis read, say)."""
    deadline = _Deadline(timeout, what)
    while not (value := await _resolved(predicate())):
        deadline.check(value)
        await asyncio.sleep(interval)
    return value


async def _resolved(value):
    return await value if inspect.isawaitable(value) else value
