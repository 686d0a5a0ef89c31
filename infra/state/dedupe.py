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

    @property
    def ttl_seconds(self) -> int:
        return self._ttl

    @staticmethod
    def marker(kind: str, value: str) -> str:
        """The key of a first-seen marker, for writers that set it in a step of their own (infra/jobs.py)."""
        return keys.dedupe(kind, value)
