"""Riding out a Redis outage: which errors mean "Redis is away for now", and how long to wait.

A managed Redis failover or a maintenance restart takes Redis away for seconds. Long-lived
processes (web, worker, socket, mcp) must keep running through it and pick up where they were;
one-shot commands report it in one line instead (bot/cli/errors.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from redis.backoff import EqualJitterBackoff

# One answer to "is Redis away?" for every layer (the agent's jobs ask it too).
from infra.transient import REDIS_AWAY, is_redis_away

__all__ = ["REDIS_AWAY", "is_redis_away", "Reconnecting", "RedisUnreachable", "wait_for_redis"]

# Waits grow from 0.2 s to 3 s, each with up to half of it as jitter, so the workers of a
# deployment do not reconnect in lock step when Redis comes back.
BACKOFF_BASE_SECONDS = 0.2
BACKOFF_CAP_SECONDS = 3.0


@dataclass
class Reconnecting:
    """The state of one process's view of Redis: up, or away since when, with the next wait.

    `failed()` logs the first failure of an outage once (not every poll) and returns the wait
    before the next try; `recovered()` logs how long the outage lasted.
    """

    what: str
    log: logging.Logger
    announce: bool = True  # False: the first failure is not logged (the caller reports the outage itself)
    failures: int = 0
    away_since: float = 0.0
    _backoff: EqualJitterBackoff = field(
        default_factory=lambda: EqualJitterBackoff(cap=BACKOFF_CAP_SECONDS, base=BACKOFF_BASE_SECONDS))

    @property
    def away(self) -> bool:
        return self.failures > 0

    def failed(self, error: BaseException) -> float:
        if not self.failures:
            self.away_since = time.monotonic()
            if self.announce:
                self.log.warning("%s: Redis is unreachable (%s: %s); retrying with backoff", self.what,
                                 type(error).__name__, error)
        self.failures += 1
        return self._backoff.compute(self.failures)

    def recovered(self) -> None:
        if self.failures:
            self.log.warning("%s: Redis is back after %.1fs (%d retries)", self.what,
                             time.monotonic() - self.away_since, self.failures)
        self.failures = 0

    async def wait_after(self, error: BaseException) -> None:
        await asyncio.sleep(self.failed(error))


# How long a starting process waits for Redis before giving up with one line: long enough for
# a Redis started beside it (docker compose, a Procfile runner) or a failover in progress.
STARTUP_WAIT_SECONDS = 30.0


class RedisUnreachable(Exception):
    """Redis did not answer at start-up within STARTUP_WAIT_SECONDS (bot/cli/errors.py says it in one line)."""

    def __init__(self, url: str, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.url = url
        self.error = error


async def wait_for_redis(ping, url: str, log: logging.Logger, *, what: str,
                         timeout: float = STARTUP_WAIT_SECONDS) -> None:
    """Call `ping()` until Redis answers; raise RedisUnreachable after `timeout` seconds. The wait
    itself logs nothing: a Redis that never answers is one line at the end (bot/cli/errors.py), and
    one that answers late is logged as back after so long."""
    state = Reconnecting(what, log, announce=False)
    deadline = time.monotonic() + timeout
    while True:
        try:
            await ping()
        except Exception as error:
            if not is_redis_away(error):
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RedisUnreachable(url, error) from error
            await asyncio.sleep(min(state.failed(error), remaining))  # the last wait ends at the deadline
        else:
            state.recovered()
            return
