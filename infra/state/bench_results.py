"""The latest benchmark of a channel's endpoint (the `cells` of a `tpubot bench --json`), for `/tpu cost`."""

from __future__ import annotations

import json
from typing import Any

from redis.asyncio import Redis

from infra.state import keys


class BenchResults:
    def __init__(self, redis: Redis, ttl_seconds: int = 30 * 86_400) -> None:
        self._redis = redis
        self._ttl = ttl_seconds

    async def save(self, team: str, channel: str, cells: list[dict[str, Any]]) -> None:
        await self._redis.set(keys.bench_result(team, channel), json.dumps(cells), ex=self._ttl)

    async def latest(self, team: str, channel: str) -> list[dict[str, Any]]:
        raw = await self._redis.get(keys.bench_result(team, channel))
        if not raw:
            return []
        try:
            cells = json.loads(raw)
        except ValueError:
            return []
        return [cell for cell in cells if isinstance(cell, dict)] if isinstance(cells, list) else []
