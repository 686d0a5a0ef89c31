"""Where the bot talks: whether it is in a channel, as far as Slack has told us, and the threads
it follows.

Slash commands work in every conversation, but posting needs membership (`not_in_channel`,
`channel_not_found`). Nothing may call Slack before a command's ack, so what the web process
knows comes from Redis: `member_joined_channel` / `member_left_channel` events for the bot
itself, and the answers to the bot's own posts. A channel nobody has told us about is
"unknown": the command goes ahead, and the first post (the provision job's status card)
settles it.
"""

from __future__ import annotations

from enum import Enum

from redis.asyncio import Redis

from infra.state import keys


class Membership(str, Enum):
    IN = "in"
    OUT = "out"
    UNKNOWN = "unknown"


class ChannelMembership:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def status(self, team: str, channel: str) -> Membership:
        value = await self._redis.get(keys.membership(team, channel))
        return Membership(value.decode()) if value else Membership.UNKNOWN

    async def record(self, team: str, channel: str, member: bool) -> bool:
        """Store what Slack said; True when it changes what was known (first news of a removal, say)."""
        new = (Membership.IN if member else Membership.OUT).value
        old = await self._redis.set(keys.membership(team, channel), new, get=True)
        return (old.decode() if old else Membership.UNKNOWN.value) != new


# Threads the bot follows (issue 32): one it started (an incident) or answered (a mention) is
# marked here, so a plain reply in it is answered without a new mention. The mark lives as long
# as FOLLOWUP_MAX_AGE; "stop" in the thread removes it.
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
