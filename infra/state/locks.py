"""Per-channel operation lock: SET NX PX with a random token, released and extended only
by the holder of the token (compare-and-delete / compare-and-expire scripts), TTL always.

A holder that says who it is (a worker process, by its id) takes tokens `<owner>.<random hex>`,
so a lock whose owner has provably died (its liveness key gone) can be released by a sweep in
seconds rather than by its TTL (bot/orphaned_jobs.py). Plain tokens (the web process, the CLI)
name no owner and are left to their TTL.
"""

from __future__ import annotations

import secrets
from contextlib import asynccontextmanager
from collections.abc import AsyncIterator

from redis.asyncio import Redis

from infra.state import keys

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: the lock. ARGV: the liveness-key prefix. Compare-and-delete in one step: the lock goes
# only if its token names an owner and that owner's liveness key is gone.
_RELEASE_IF_OWNER_DEAD = """
local token = redis.call('GET', KEYS[1])
if not token then return 0 end
local dot = string.find(token, '.', 1, true)
if not dot or dot == 1 then return 0 end
if redis.call('EXISTS', ARGV[1] .. string.sub(token, 1, dot - 1)) == 1 then return 0 end
return redis.call('DEL', KEYS[1])
"""
OWNER_SEPARATOR = "."  # the script above splits on it; worker ids are hex, plain tokens have none
_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class LockNotAcquired(Exception):
    """Another operation holds this channel's lock."""


class ChannelLocks:
    def __init__(self, redis: Redis, ttl_ms: int = 60_000, owner: str | None = None) -> None:
        if owner is not None and (not owner or OWNER_SEPARATOR in owner):
            raise ValueError(f"a lock owner is a non-empty id without {OWNER_SEPARATOR!r}, not {owner!r}")
        self._redis = redis
        self._ttl_ms = ttl_ms
        self._owner = owner
        self._release = redis.register_script(_RELEASE)
        self._extend = redis.register_script(_EXTEND)

    async def acquire(self, team: str, channel: str, ttl_ms: int | None = None) -> str | None:
        token = secrets.token_hex(16)
        if self._owner is not None:
            token = f"{self._owner}{OWNER_SEPARATOR}{token}"
        ok = await self._redis.set(keys.lock(team, channel), token, nx=True, px=ttl_ms or self._ttl_ms)
        return token if ok else None

    async def release(self, team: str, channel: str, token: str) -> bool:
        return bool(await self._release(keys=[keys.lock(team, channel)], args=[token]))

    async def extend(self, team: str, channel: str, token: str, ttl_ms: int | None = None) -> bool:
        return bool(await self._extend(keys=[keys.lock(team, channel)], args=[token, ttl_ms or self._ttl_ms]))

    async def holder_token(self, team: str, channel: str) -> str | None:
        value = await self._redis.get(keys.lock(team, channel))
        return value.decode() if isinstance(value, bytes) else value

    async def remaining_seconds(self, team: str, channel: str) -> float:
        """How long until the current holder's lock expires (0 if free)."""
        ttl_ms = await self._redis.pttl(keys.lock(team, channel))
        return max(0.0, ttl_ms / 1000) if ttl_ms and ttl_ms > 0 else 0.0

    async def force_unlock(self, team: str, channel: str) -> bool:
        """Admin escape hatch; callers must check the actor is an admin."""
        return bool(await self._redis.delete(keys.lock(team, channel)))

    @asynccontextmanager
    async def held(self, team: str, channel: str) -> AsyncIterator[str]:
        token = await self.acquire(team, channel)
        if token is None:
            raise LockNotAcquired(f"{team}/{channel}")
        try:
            yield token
        finally:
            await self.release(team, channel, token)


async def release_locks_of_dead_owners(redis: Redis, alive_prefix: str, *, scan_count: int = 500) -> list[str]:
    """Release every lock whose token names an owner without a key `alive_prefix + owner`: a
    process that died holding it. Live owners' and plain tokens' locks are untouched. The
    released lock keys."""
    release = redis.register_script(_RELEASE_IF_OWNER_DEAD)
    released = []
    async for key in redis.scan_iter(match=keys.lock_pattern(), count=scan_count):
        if await release(keys=[key], args=[alive_prefix]):
            released.append(key.decode() if isinstance(key, bytes) else key)
    return released
