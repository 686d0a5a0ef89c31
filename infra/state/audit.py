"""Append-only audit trail of every action (who, what, where, outcome) in a Redis stream."""

from __future__ import annotations

import time
from dataclasses import dataclass

from redis.asyncio import Redis

from infra.state import keys
from infra.state.replies import as_text


@dataclass(frozen=True)
class AuditEntry:
    at: float
    actor: str
    action: str
    team: str
    channel: str
    outcome: str
    detail: str = ""


class AuditLog:
    def __init__(self, redis: Redis, max_len: int = 100_000) -> None:
        self._redis = redis
        self._max_len = max_len

    async def record(self, *, actor: str, action: str, team: str, channel: str, outcome: str, detail: str = "") -> None:
        await self._redis.xadd(
            keys.audit_stream(),
            {"at": f"{time.time():.3f}", "actor": actor, "action": action, "team": team,
             "channel": channel, "outcome": outcome, "detail": detail[:500]},
            maxlen=self._max_len,
            approximate=True,
        )

    async def recent(self, count: int = 20) -> list[AuditEntry]:
        rows = await self._redis.xrevrange(keys.audit_stream(), count=count)
        entries = []
        for _id, fields in rows:
            f = {as_text(k): as_text(v) for k, v in fields.items()}
            entries.append(AuditEntry(at=float(f["at"]), actor=f["actor"], action=f["action"], team=f["team"],
                                      channel=f["channel"], outcome=f["outcome"], detail=f.get("detail", "")))
        return entries
