"""What the bot remembers of ended incidents (issue 32): each investigated thread is kept with the
signatures of its digest's top templates; once it ends (its alert resolved, or someone wrote
"fixed by …" in it) a new incident whose top templates match can cite it. Keys expire after
RETENTION_SECONDS; nothing leaves the workspace's Redis."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Awaitable, cast

from redis.asyncio import Redis

from infra.state import keys
from infra.state.replies import as_text

RETENTION_SECONDS = 90 * 86_400
FIX_KEPT = 300


def signature(template: str) -> str:
    """A template's signature: the same masked template hashes the same in every incident."""
    return hashlib.sha256(template.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Remembered:
    channel: str
    thread_ts: str
    title: str
    at: float
    fixed_by: str
    matched: int  # top templates in common


class IncidentMemory:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def observe(self, team: str, channel: str, thread_ts: str, signatures: list[str], title: str,
                      at: float) -> None:
        """Keep an investigated thread (not ended yet) under its top templates' signatures."""
        key = keys.memory_thread(team, channel, thread_ts)
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(key, mapping={"signatures": ",".join(signatures), "title": title[:200], "at": f"{at:.3f}",
                                "ended": "0", "fixed_by": ""})
        pipe.expire(key, RETENTION_SECONDS)
        for sig in signatures:
            pipe.sadd(keys.memory_signature(team, sig), f"{channel}:{thread_ts}")
            pipe.expire(keys.memory_signature(team, sig), RETENTION_SECONDS)
        await pipe.execute()

    async def end(self, team: str, channel: str, thread_ts: str, fixed_by: str = "") -> bool:
        """Mark the thread's incident ended (with how it was fixed, if said); False: not a remembered thread."""
        key = keys.memory_thread(team, channel, thread_ts)
        if not await self._redis.exists(key):
            return False
        fields = {"ended": "1", **({"fixed_by": fixed_by[:FIX_KEPT]} if fixed_by else {})}
        await cast(Awaitable[int], self._redis.hset(key, mapping=fields))
        return True

    async def recall(self, team: str, signatures: list[str], *, exclude: tuple[str, str]) -> Remembered | None:
        """The ended incident sharing the most of `signatures` (at least two, or all of fewer), newest first."""
        if not signatures:
            return None
        shared: Counter[str] = Counter()
        for sig in signatures:
            for ref in await cast(Awaitable[set], self._redis.smembers(keys.memory_signature(team, sig))):
                shared[as_text(ref)] += 1
        shared.pop(f"{exclude[0]}:{exclude[1]}", None)
        needed = min(2, len(signatures))
        best: Remembered | None = None
        for ref, count in shared.items():
            if count < needed:
                continue
            channel, _, thread_ts = ref.partition(":")
            raw = await cast(Awaitable[dict], self._redis.hgetall(keys.memory_thread(team, channel, thread_ts)))
            fields = {as_text(k): as_text(v) for k, v in raw.items()}
            if fields.get("ended") != "1":
                continue
            found = Remembered(channel, thread_ts, fields.get("title", ""), float(fields.get("at", "0") or 0),
                               fields.get("fixed_by", ""), count)
            if best is None or (found.matched, found.at) > (best.matched, best.at):
                best = found
        return best
