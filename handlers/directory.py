"""Slack user-group membership for access rules, and channel names for what people read, cached
in Redis so every replica shares them."""

from __future__ import annotations

import json
import logging

from redis.asyncio import Redis
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from handlers.notifier import slack_error

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
            log.warning("usergroups.users.list %s failed: %s", group_id, slack_error(error))
            return frozenset()
        users: list[str] = list(response.get("users", []))
        await self._redis.set(key, json.dumps(users), ex=self._ttl)
        return frozenset(users)

    async def channel_name(self, channel_id: str) -> str | None:
        """The channel's name (`tpu-ml`), for tables where Slack cannot render `<#C…>` (code blocks);
        None when Slack will not say (not a member of a private channel), and the id is shown."""
        key = f"tpubot:channel-name:{channel_id}"
        cached = await self._redis.get(key)
        if cached is not None:
            return cached.decode() if isinstance(cached, bytes) else str(cached)
        try:
            response = await self._client.conversations_info(channel=channel_id)
        except SlackApiError as error:
            log.info("conversations.info %s failed: %s", channel_id, slack_error(error))
            return None
        name = (response.get("channel") or {}).get("name")
        if not name:
            return None
        await self._redis.set(key, name, ex=self._ttl * 12)  # names change rarely: an hour
        return str(name)
