"""Which errors mean "try again later", not "this failed": one answer for every job and process.

A managed Redis failover or restart takes Redis away for seconds: redis-py raises ConnectionError
or TimeoutError while it is unreachable, BusyLoadingError (a ConnectionError) while a restarted
server loads its data (`LOADING`), and ReadOnlyError when the address now leads to a replica
(`READONLY`: the failover has not finished moving the primary). A cloud call that Google answers
503 or 429, or whose connection or token fetch drops, is classified by its client as retryable
(`TpuError.retryable`, google-auth's `retryable`). None of these says anything about the work: a
job that meets one is run again later, and nothing it guards (a lease, a running TPU) is ended.
"""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.exceptions import WatchError

# What redis-py raises while the server is away (BusyLoadingError is a ConnectionError subclass).
REDIS_AWAY: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, ReadOnlyError)


def is_redis_away(error: BaseException) -> bool:
    """A connection error, a READONLY or LOADING reply, or the WatchError redis-py raises instead
    when the connection drops under a WATCH (arq's job start WATCHes outside its own try)."""
    if isinstance(error, REDIS_AWAY):
        return True
    return isinstance(error, WatchError) and isinstance(error.__context__, REDIS_AWAY)


def is_transient(error: BaseException) -> bool:
    """Redis away, or a call its own client classified as worth retrying (503, 429, a dropped
    connection, a metadata server that did not answer)."""
    if is_redis_away(error):
        return True
    return bool(getattr(error, "retryable", False))
