"""Alert bookkeeping shared by every worker: "this alert was posted" markers and acknowledgements,
who is paged for each channel, and the latest benchmark `/tpu cost` reports.

A marker is `SET NX` with a TTL that outlives the lease, so however many workers fire the
same timer (or a watcher and a timer both see the expiry), one of them posts. An
acknowledgement is kept per lease and kind, with who and when, for the cost receipt.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, cast
# cast(Awaitable[...]): redis-py's asyncio client carries the sync client's `Awaitable[X] | X` types

from redis.asyncio import Redis

from infra.state import keys
from infra.state.replies import as_text

DAY = 86_400


@dataclass(frozen=True)
class Ack:
    kind: str
    user: str
    at: float


class AlertMarks:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def claim(self, lease_id: str, kind: str, *, ttl_seconds: int) -> bool:
        """True exactly once per (lease, kind) while the marker lives: the caller posts."""
        return bool(await self._redis.set(keys.alert_mark(lease_id, kind), f"{time.time():.3f}", nx=True,
                                          ex=max(int(ttl_seconds), 60)))

    async def unclaim(self, lease_id: str, kind: str) -> None:
        """Give the claim back after a failed post, so a retry can post."""
        await self._redis.delete(keys.alert_mark(lease_id, kind))

    async def claimed(self, lease_id: str, kind: str) -> bool:
        return bool(await self._redis.exists(keys.alert_mark(lease_id, kind)))

    async def acknowledge(self, lease_id: str, kind: str, user: str, *, ttl_seconds: int = 7 * DAY) -> bool:
        """Record the first acknowledgement of (lease, kind); False if it was already acknowledged."""
        key = keys.alert_acks(lease_id)
        created = await cast(Awaitable[bool], self._redis.hsetnx(key, kind, f"{user}|{time.time():.3f}"))
        await self._redis.expire(key, ttl_seconds)
        return bool(created)

    async def acks(self, lease_id: str) -> list[Ack]:
        raw = await cast(Awaitable[dict], self._redis.hgetall(keys.alert_acks(lease_id)))
        acks = []
        for kind, value in raw.items():
            user, _, at = as_text(value).partition("|")
            acks.append(Ack(kind=as_text(kind), user=user, at=float(at or 0)))
        return sorted(acks, key=lambda ack: ack.at)


# Who is paged for a channel: Slack mention tokens (`<!subteam^S…>`, `<@U…>`), stored per channel.
class OnCallStore:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def get(self, team: str, channel: str) -> list[str]:
        return [str(item) for item in _json_list(await self._redis.get(keys.oncall(team, channel)))]

    async def set(self, team: str, channel: str, mentions: list[str]) -> None:
        await self._redis.set(keys.oncall(team, channel), json.dumps(list(mentions)))

    async def clear(self, team: str, channel: str) -> None:
        await self._redis.delete(keys.oncall(team, channel))


# The latest benchmark of a channel's endpoint (the `cells` of a `tpubot bench --json`), for `/tpu cost`.
class BenchResults:
    def __init__(self, redis: Redis, ttl_seconds: int = 30 * 86_400) -> None:
        self._redis = redis
        self._ttl = ttl_seconds

    async def save(self, team: str, channel: str, cells: list[dict[str, Any]]) -> None:
        await self._redis.set(keys.bench_result(team, channel), json.dumps(cells), ex=self._ttl)

    async def latest(self, team: str, channel: str) -> list[dict[str, Any]]:
        return [cell for cell in _json_list(await self._redis.get(keys.bench_result(team, channel)))
                if isinstance(cell, dict)]


def _json_list(raw: bytes | str | None) -> list:
    """A stored JSON list; [] when nothing is stored, or what is stored is not a JSON list."""
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return []
    return value if isinstance(value, list) else []
