"""Slack user-group membership for access rules, cached in Redis so every replica shares it."""

from __future__ import annotations

import json
import logging

from redis.asyncio import Redis
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)


class SlackGroupDirectory:
    def __init__(self, client: AsyncWebClient, redis: Redis, ttl_seconds: int = 300) -> None:
        self._client = client
        self._redis = redis
        self._ttl = ttl_seconds

    async def members(self, group_id: str) -> frozenset[str]:
        key = f"tpubot:group:{group_id}"
        cached = await self._redis.get(key)
        if cached is not None:
            return frozenset(json.loads(cached))
        try:
            response = await self._client.usergroups_users_list(usergroup=group_id)
        except SlackApiError as error:
            # A group we cannot read grants nothing (fail closed), and is retried after the TTL.
            reason = error.response.data.get("error") if isinstance(error.response.data, dict) else error.response.status_code
            log.warning("usergroups.users.list %s failed: %s", group_id, reason)
            return frozenset()
        users: list[str] = list(response.get("users", []))
        await self._redis.set(key, json.dumps(users), ex=self._ttl)
        return frozenset(users)
