"""Incidents opened from alert webhooks (issue 32): one record per (source, incident key) with
the thread it lives in, and the storm window that bounds how many a source may open.

Opening is one Lua script: a record that exists means a repeat (the caller updates its thread);
otherwise the source's window counter decides between opening (a record is made, status
`opening` until the thread's ts is set) and folding (the key joins the window's folded set, so
a folded group that Alertmanager re-sends is counted once).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Awaitable, cast

from redis.asyncio import Redis

from infra.state import keys
from infra.state.replies import as_text

INCIDENT_TTL_SECONDS = 14 * 86_400

# KEYS: incident, window counter, window's folded set. ARGV: channel, now, limit, window s, ttl, key.
# 0: a record exists; 1: opened; -n: folded, n distinct keys folded in this window.
_OPEN = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('SISMEMBER', KEYS[3], ARGV[6]) == 1 then return -redis.call('SCARD', KEYS[3]) end
local opened = redis.call('INCR', KEYS[2])
if opened == 1 then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
if opened > tonumber(ARGV[3]) then
  redis.call('SADD', KEYS[3], ARGV[6])
  redis.call('EXPIRE', KEYS[3], ARGV[4] * 2)
  return -redis.call('SCARD', KEYS[3])
end
redis.call('HSET', KEYS[1], 'channel', ARGV[1], 'opened', ARGV[2], 'status', 'opening', 'repeats', '0', 'ts', '')
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


@dataclass(frozen=True)
class Incident:
    source: str
    key: str
    channel: str
    ts: str  # the root message of its thread; "" while it is being opened
    status: str  # opening | firing | resolved
    repeats: int
    opened: float


@dataclass(frozen=True)
class Opening:
    opened: bool  # this call opened it: post the thread
    exists: bool  # a record was there already: a repeat
    folded: int  # > 0: folded by the storm limit, the window's folded count so far
    window: int  # the window's number (its start / window length)


class IncidentStore:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._open = redis.register_script(_OPEN)

    async def open(self, source: str, key: str, channel: str, *, limit: int, window_seconds: int,
                   now: float | None = None) -> Opening:
        now = time.time() if now is None else now
        window = int(now // max(window_seconds, 1))
        result = int(await self._open(
            keys=[keys.incident(source, key), keys.incident_window(source, window), keys.incident_folded(source, window)],
            args=[channel, f"{now:.3f}", limit, max(window_seconds, 1), INCIDENT_TTL_SECONDS, key]))
        return Opening(opened=result == 1, exists=result == 0, folded=-result if result < 0 else 0, window=window)

    async def get(self, source: str, key: str) -> Incident | None:
        raw = await cast(Awaitable[dict], self._redis.hgetall(keys.incident(source, key)))
        if not raw:
            return None
        fields = {as_text(k): as_text(v) for k, v in raw.items()}
        return Incident(source, key, fields.get("channel", ""), fields.get("ts", ""), fields.get("status", ""),
                        int(fields.get("repeats", "0") or 0), float(fields.get("opened", "0") or 0))

    async def set_thread(self, source: str, key: str, ts: str) -> None:
        await cast(Awaitable[int], self._redis.hset(keys.incident(source, key), mapping={"ts": ts, "status": "firing"}))

    async def set_status(self, source: str, key: str, status: str) -> None:
        await cast(Awaitable[int], self._redis.hset(keys.incident(source, key), "status", status))

    async def repeated(self, source: str, key: str) -> int:
        return int(await cast(Awaitable[int], self._redis.hincrby(keys.incident(source, key), "repeats", 1)))

    async def forget(self, source: str, key: str) -> None:
        """Drop a record whose thread could not be opened, so a retry opens it."""
        await self._redis.delete(keys.incident(source, key))

    async def folded(self, source: str, window: int) -> int:
        return int(await cast(Awaitable[int], self._redis.scard(keys.incident_folded(source, window))))

    async def storm_message(self, source: str, window: int) -> tuple[str, str]:
        """(channel, ts) of the window's storm message, or ("", "")."""
        raw = await self._redis.get(keys.incident_storm_message(source, window))
        channel, _, ts = as_text(raw or "").partition("|")
        return channel, ts

    async def set_storm_message(self, source: str, window: int, channel: str, ts: str, ttl_seconds: int) -> None:
        await self._redis.set(keys.incident_storm_message(source, window), f"{channel}|{ts}", ex=max(ttl_seconds, 60))
