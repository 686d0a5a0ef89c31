"""Waiting on a condition with a timeout (never a fixed sleep) for tests of asynchronous work."""

from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
               what: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy, and return that; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout}s (last value: {value!r})"[:500])
        time.sleep(interval)


async def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
                   what: str = "condition") -> T:
    """`wait_until` for async tests: the event loop keeps running while it polls."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout}s (last value: {value!r})"[:500])
        await asyncio.sleep(interval)
