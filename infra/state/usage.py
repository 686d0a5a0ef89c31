"""The idle clock and usage totals of one lease, from successive vLLM metrics readings.

Counters are cumulative since vLLM started; a counter that goes down means vLLM restarted,
so the previous value is folded into an offset and totals keep growing. A reading that is
missing (unreachable or unparsable endpoint) restarts the idle clock: unknown is never idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, cast
# cast(Awaitable[...]): redis-py's asyncio client carries the sync client's `Awaitable[X] | X` types

from redis.asyncio import Redis

from infra.state import keys
from infra.state.replies import as_text
from infra.vllm_metrics import VllmUsage

_FIELDS = ("requests", "output_tokens", "offset_requests", "offset_tokens", "last_used_at", "metrics_at",
           "unknown_since", "idle_seconds")


@dataclass(frozen=True)
class UsageState:
    requests: float = 0.0  # total finished requests over the lease (restarts folded in)
    output_tokens: float = 0.0
    last_used_at: float = 0.0  # when the idle clock last restarted
    metrics_at: float = 0.0  # the last successful reading; 0 = never
    unknown_since: float = 0.0  # metrics unreadable since then; 0 = the last reading worked
    idle_total: float = 0.0  # seconds between two readings with no traffic in between (the waste; issue 21)

    def idle_seconds(self, now: float) -> float | None:
        """How long nobody used the model; None while metrics are unknown."""
        if self.unknown_since or not self.metrics_at or not self.last_used_at:
            return None
        return max(0.0, now - self.last_used_at)


class UsageStore:
    def __init__(self, redis: Redis, ttl_seconds: int = 8 * 86_400) -> None:
        self._redis = redis
        self._ttl = ttl_seconds

    async def get(self, lease_id: str) -> UsageState:
        raw = await cast(Awaitable[dict], self._redis.hgetall(keys.usage(lease_id)))
        values = {as_text(k): float(v) for k, v in raw.items()}
        # Less what the bot's own boot probes used: they are not traffic anybody was served.
        return UsageState(
            requests=max(0.0, values.get("offset_requests", 0.0) + values.get("requests", 0.0)
                         - values.get("probe_requests", 0.0)),
            output_tokens=max(0.0, values.get("offset_tokens", 0.0) + values.get("output_tokens", 0.0)
                              - values.get("probe_tokens", 0.0)),
            last_used_at=values.get("last_used_at", 0.0),
            metrics_at=values.get("metrics_at", 0.0),
            unknown_since=values.get("unknown_since", 0.0),
            idle_total=values.get("idle_seconds", 0.0),
        )

    async def exclude_boot_probes(self, lease_id: str, reading: VllmUsage) -> None:
        """The counters as the boot's probes left them (read before anyone else may use the model):
        what they count is the bot's own questions, kept out of the served totals."""
        key = keys.usage(lease_id)
        await cast(Awaitable[int], self._redis.hset(key, mapping={"probe_requests": repr(reading.requests),
                                                                  "probe_tokens": repr(reading.output_tokens)}))
        await self._redis.expire(key, self._ttl)

    async def record(self, lease_id: str, reading: VllmUsage | None, now: float) -> UsageState:
        """Fold one reading in. One worker runs a lease's check at a time (deterministic job ids)."""
        key = keys.usage(lease_id)
        raw = await cast(Awaitable[dict], self._redis.hgetall(key))
        old = {as_text(k): float(v) for k, v in raw.items()}
        new = {name: old.get(name, 0.0) for name in _FIELDS}
        if reading is None:
            new["last_used_at"] = now
            new["unknown_since"] = old.get("unknown_since") or now
        else:
            first = not old.get("metrics_at")
            if reading.requests < old.get("requests", 0.0) or reading.output_tokens < old.get("output_tokens", 0.0):
                new["offset_requests"] += old.get("requests", 0.0)
                new["offset_tokens"] += old.get("output_tokens", 0.0)
                changed = True
            else:
                changed = (reading.requests != old.get("requests", 0.0)
                           or reading.output_tokens != old.get("output_tokens", 0.0))
            if first or changed or reading.busy or old.get("unknown_since"):
                new["last_used_at"] = now
            elif old.get("metrics_at"):
                new["idle_seconds"] += max(0.0, now - old["metrics_at"])  # nothing ran since the last reading
            new.update(requests=reading.requests, output_tokens=reading.output_tokens, metrics_at=now,
                       unknown_since=0.0)
        await cast(Awaitable[int], self._redis.hset(key, mapping={name: repr(value) for name, value in new.items()}))
        await self._redis.expire(key, self._ttl)
        return await self.get(lease_id)
