"""Threads the bot follows (issue 32): one it started (an incident) or answered (a mention) is
marked here, so a plain reply in it is answered without a new mention. The mark lives as long
as FOLLOWUP_MAX_AGE; "stop" in the thread removes it."""

from __future__ import annotations

from redis.asyncio import Redis

from infra.state import keys


class FollowedThreads:
    def __init__(self, redis: Redis, max_age_seconds: int) -> None:
        self._redis = redis
        self.max_age_seconds = max(int(max_age_seconds), 0)  # 0: follow-ups are off

    async def follow(self, team: str, channel: str, thread_ts: str) -> None:
        if self.max_age_seconds:
            await self._redis.set(keys.followed_thread(team, channel, thread_ts), "1", ex=self.max_age_seconds)

    async def following(self, team: str, channel: str, thread_ts: str) -> bool:
        return bool(self.max_age_seconds) and bool(await self._redis.exists(keys.followed_thread(team, channel, thread_ts)))

    async def stop(self, team: str, channel: str, thread_ts: str) -> bool:
        """True when the thread was followed until now."""
        return bool(await self._redis.delete(keys.followed_thread(team, channel, thread_ts)))
