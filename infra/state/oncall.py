"""Who is paged for a channel: Slack mention tokens (`<!subteam^S…>`, `<@U…>`), stored per channel."""

from __future__ import annotations

import json

from redis.asyncio import Redis

from infra.state import keys


class OnCallStore:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def get(self, team: str, channel: str) -> list[str]:
        raw = await self._redis.get(keys.oncall(team, channel))
        if not raw:
            return []
        try:
            value = json.loads(raw)
        except ValueError:
            return []
        return [str(item) for item in value] if isinstance(value, list) else []

    async def set(self, team: str, channel: str, mentions: list[str]) -> None:
        await self._redis.set(keys.oncall(team, channel), json.dumps(list(mentions)))

    async def clear(self, team: str, channel: str) -> None:
        await self._redis.delete(keys.oncall(team, channel))
