"""First-seen markers shared by all replicas (Slack retries land on any of them)."""

from __future__ import annotations

from redis.asyncio import Redis

from infra.state import keys


class Dedupe:
    def __init__(self, redis: Redis, ttl_seconds: int = 3600) -> None:
        self._redis = redis
        self._ttl = ttl_seconds

    async def first_time(self, kind: str, value: str) -> bool:
        """True exactly once per (kind, value) within the TTL, across processes."""
        return bool(await self._redis.set(keys.dedupe(kind, value), "1", nx=True, ex=self._ttl))

    async def first_times(self, markers: list[tuple[str, str]]) -> list[bool]:
        """first_time for several (kind, value) markers in one round trip; all are set."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for kind, value in markers:
                pipe.set(keys.dedupe(kind, value), "1", nx=True, ex=self._ttl)
            return [bool(reply) for reply in await pipe.execute()]

    async def forget(self, markers: list[tuple[str, str]]) -> None:
        """Undo markers for a delivery that was not taken after all, so its retry is not a duplicate."""
        if markers:
            await self._redis.delete(*(keys.dedupe(kind, value) for kind, value in markers))
