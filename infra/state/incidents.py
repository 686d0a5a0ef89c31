"""Incidents opened from alert webhooks (issues 32 and 42): one record per (source, incident key)
with the thread it lives in and the incident's state as its source reports it, and the storm
windows that bound how many threads a route may open for one severity.

Opening is one Lua script: a record that exists means a repeat (the caller updates its thread);
otherwise, unless the alert pages (a page is never folded), the window counter of its storm
scope — its ALERT_ROUTES rule and its severity, so a warning storm on one route never folds a
critical on another, nor one on the same route — decides between opening (a record is made, its
`ts` empty until the thread is posted) and folding (the key joins the window's folded set, so a
folded group that Alertmanager re-sends is counted once, and its source's count goes up).

State is written by `apply`, one Lua script too: each group of fields is guarded by a time field
and written only when the delivery is not older than what the record holds, so deliveries that
the worker runs out of order (PagerDuty sends an incident's events in order; jobs run at once)
never put an older state back. `version` grows with every write, so whoever renders the record
can tell it changed meanwhile.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Awaitable, cast

from redis.asyncio import Redis

from infra.state import keys
from infra.state.replies import as_text

INCIDENT_TTL_SECONDS = 14 * 86_400
# A resolve of an incident not opened yet waits this long for its open: as long as a queued job can
# still run (arq drops a job a day after it was due, `expires_extra_ms`).
EARLY_RESOLVE_SECONDS = 86_400
NEVER_FOLD = -1  # the limit of an alert that pages

# KEYS: incident, window counter, window's folded set, window's folded count per source, the
# incident's early resolve. ARGV: channel, now, limit (NEVER_FOLD: no limit), window s, ttl,
# folded member, source, opener (the job opening it). 0: a record exists; 1: opened (an early
# resolve moves into the record, as `resolved_early`); 2: the same opener's earlier run left it
# half-opened (its worker died before the thread was posted): open it again; -n: folded, n
# distinct alerts folded in this window.
_OPEN = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  if ARGV[8] ~= '' and redis.call('HGET', KEYS[1], 'ts') == '' and redis.call('HGET', KEYS[1], 'opener') == ARGV[8] then
    return 2
  end
  return 0
end
local limit = tonumber(ARGV[3])
if limit >= 0 then
  if redis.call('SISMEMBER', KEYS[3], ARGV[6]) == 1 then return -redis.call('SCARD', KEYS[3]) end
  local opened = redis.call('INCR', KEYS[2])
  if opened == 1 then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
  if opened > limit then
    if redis.call('SADD', KEYS[3], ARGV[6]) == 1 then redis.call('HINCRBY', KEYS[4], ARGV[7], 1) end
    redis.call('EXPIRE', KEYS[3], ARGV[4] * 2)
    redis.call('EXPIRE', KEYS[4], ARGV[4] * 2)
    return -redis.call('SCARD', KEYS[3])
  end
end
redis.call('HSET', KEYS[1], 'channel', ARGV[1], 'opened', ARGV[2], 'repeats', '0', 'ts', '', 'version', '0',
           'opener', ARGV[8])
local early = redis.call('GET', KEYS[5])
if early then
  redis.call('HSET', KEYS[1], 'resolved_early', early)
  redis.call('DEL', KEYS[5])
end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""

# KEYS: the incident, its early resolve. ARGV: the resolve's time, the resolve, ttl. 0 when the
# incident has a record (the resolve applies to it); 1 when the resolve is kept for its open (the
# newer of two is kept).
_RESOLVE_EARLY = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local kept = redis.call('GET', KEYS[2])
if kept and tonumber(string.match(kept, '^[^|]*')) > tonumber(ARGV[1]) then return 1 end
redis.call('SET', KEYS[2], ARGV[1] .. '|' .. ARGV[2], 'EX', ARGV[3])
return 1
"""

# KEYS[1]: the incident. ARGV[1]: r, then r field names whose replaced value is kept as
# <field>_was; then groups, each: guard field, time, m, and m field/value pairs. A group is
# written when its time is not older than its guard's, which then holds that time.
# Returns {fields whose value changed, the record as HGETALL's flat list}; {{}, {}} without a record.
_APPLY = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {{}, {}} end
local r = tonumber(ARGV[1])
local remember = {}
for j = 2, r + 1 do remember[ARGV[j]] = true end
local changed = {}
local i = r + 2
while i <= #ARGV do
  local guard, at, m = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if at >= (tonumber(redis.call('HGET', KEYS[1], guard) or '0') or 0) then
    redis.call('HSET', KEYS[1], guard, ARGV[i + 1])
    for k = 0, m - 1 do
      local name, value = ARGV[i + 3 + 2 * k], ARGV[i + 4 + 2 * k]
      local old = redis.call('HGET', KEYS[1], name) or ''
      if old ~= value then
        if remember[name] and old ~= '' then redis.call('HSET', KEYS[1], name .. '_was', old) end
        redis.call('HSET', KEYS[1], name, value)
        changed[#changed + 1] = name
      end
    end
  end
  i = i + 3 + 2 * m
end
if #changed > 0 then redis.call('HINCRBY', KEYS[1], 'version', 1) end
return {changed, redis.call('HGETALL', KEYS[1])}
"""

# KEYS[1]: the incident. ARGV: now. One more "sent again", when it has a record.
_REPEAT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'last_repeat', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'version', 1)
return redis.call('HINCRBY', KEYS[1], 'repeats', 1)
"""

# KEYS[1]: the incident. ARGV: who is paged, why. 1 when this call paged it; 0 when it had paged
# before or has no record.
_CLAIM_PAGE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HSETNX', KEYS[1], 'paged', ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'paged_for', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'version', 1)
return 1
"""

# KEYS[1]: a storm message's slot. ARGV[1]: the claim's value (no ts yet). Deleted only while it
# is still that claim.
_RELEASE_CLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True)
class Incident:
    source: str
    key: str
    channel: str
    ts: str  # the root message of its thread; "" while it is being opened
    status: str  # firing | resolved ("" before its first state is applied)
    repeats: int
    opened: float
    version: int = 0
    fields: dict[str, str] = field(default_factory=dict)  # the whole record, the source's state included

    @classmethod
    def of(cls, source: str, key: str, fields: dict[str, str]) -> Incident:
        return cls(source, key, fields.get("channel", ""), fields.get("ts", ""), fields.get("status", ""),
                   int(fields.get("repeats", "0") or 0), float(fields.get("opened", "0") or 0),
                   int(fields.get("version", "0") or 0), fields)


@dataclass(frozen=True)
class StateUpdate:
    """Fields the source reported at `at` (epoch seconds), guarded by `guard`."""

    guard: str
    at: float
    fields: dict[str, str]


@dataclass(frozen=True)
class Applied:
    changed: frozenset[str]  # fields whose value this call changed
    incident: Incident | None  # the record after; None when there is none


@dataclass(frozen=True)
class Opening:
    opened: bool  # this call opened it: post the thread
    exists: bool  # a record was there already: a repeat
    folded: int  # > 0: folded by the storm limit, the window's folded count so far
    window: int  # the window's number (its start / window length)


class IncidentStore:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._open = redis.register_script(_OPEN)
        self._apply = redis.register_script(_APPLY)
        self._repeat = redis.register_script(_REPEAT)
        self._claim_page = redis.register_script(_CLAIM_PAGE)
        self._resolve_early = redis.register_script(_RESOLVE_EARLY)
        self._release_claim = redis.register_script(_RELEASE_CLAIM)

    async def open(self, source: str, key: str, channel: str, *, route: str, severity: str, limit: int,
                   window_seconds: int, now: float | None = None, opener: str = "") -> Opening:
        """Open the incident, or fold it into the window of its route and severity (`limit`
        NEVER_FOLD: never fold). `opener`: the job that opens it; that job run again (arq runs a
        job again when its worker died) takes over the record it left half-opened."""
        now = time.time() if now is None else now
        window = int(now // max(window_seconds, 1))
        scope = keys.storm_scope(route, severity)
        result = int(await self._open(
            keys=[keys.incident(source, key), keys.incident_window(scope, window), keys.incident_folded(scope, window),
                  keys.incident_folded_sources(scope, window), keys.incident_resolved(source, key)],
            args=[channel, f"{now:.3f}", limit, max(window_seconds, 1), INCIDENT_TTL_SECONDS, f"{source}\0{key}",
                  source, opener]))
        return Opening(opened=result in (1, 2), exists=result == 0, folded=-result if result < 0 else 0, window=window)

    async def resolve_early(self, source: str, key: str, at: float, resolve: str) -> bool:
        """Keep a resolve of an incident that has no record yet (its open may be running right
        now: jobs run at once) for its open to apply; False when the record exists after all."""
        kept = await self._resolve_early(keys=[keys.incident(source, key), keys.incident_resolved(source, key)],
                                         args=[f"{at:.6f}", resolve, EARLY_RESOLVE_SECONDS])
        return bool(kept)

    @staticmethod
    def early_resolve(record: Incident) -> tuple[float, str] | None:
        """The resolve its open found waiting (time, the resolve), if any."""
        at, bar, resolve = record.fields.get("resolved_early", "").partition("|")
        return (float(at), resolve) if bar else None

    async def get(self, source: str, key: str) -> Incident | None:
        raw = await cast(Awaitable[dict], self._redis.hgetall(keys.incident(source, key)))
        if not raw:
            return None
        return Incident.of(source, key, {as_text(k): as_text(v) for k, v in raw.items()})

    async def apply(self, source: str, key: str, updates: list[StateUpdate], *,
                    remember: tuple[str, ...] = ()) -> Applied:
        args: list[str | int] = [len(remember), *remember]
        for update in updates:
            args += [update.guard, f"{update.at:.6f}", len(update.fields)]
            for name, value in update.fields.items():
                args += [name, value]
        changed, flat = await self._apply(keys=[keys.incident(source, key)], args=args)
        if not flat:
            return Applied(frozenset(), None)
        record = {as_text(flat[i]): as_text(flat[i + 1]) for i in range(0, len(flat), 2)}
        return Applied(frozenset(as_text(name) for name in changed), Incident.of(source, key, record))

    async def set_thread(self, source: str, key: str, ts: str) -> None:
        await cast(Awaitable[int], self._redis.hset(keys.incident(source, key), "ts", ts))

    async def claim_page(self, source: str, key: str, mentions: list[str], reason: str) -> bool:
        """Record that the incident pages `mentions` for `reason`; False when it has paged before
        (an incident pages once, however many deliveries say it should)."""
        claimed = await self._claim_page(keys=[keys.incident(source, key)], args=[" ".join(mentions), reason])
        return bool(claimed)

    async def unclaim_page(self, source: str, key: str) -> None:
        """Undo `claim_page` when the page could not be posted, so a retry pages."""
        await cast(Awaitable[int], self._redis.hdel(keys.incident(source, key), "paged", "paged_for"))

    async def repeated(self, source: str, key: str, now: float | None = None) -> int:
        """Count one more delivery of a firing incident; the count so far."""
        return int(await self._repeat(keys=[keys.incident(source, key)],
                                      args=[f"{time.time() if now is None else now:.3f}"]))

    async def version(self, source: str, key: str) -> int:
        raw = await cast(Awaitable[bytes | str | None], self._redis.hget(keys.incident(source, key), "version"))
        return int(as_text(raw or "0") or 0)

    async def forget(self, source: str, key: str) -> None:
        """Drop a record whose thread could not be opened, so a retry opens it."""
        await self._redis.delete(keys.incident(source, key))

    async def folded(self, route: str, severity: str, window: int) -> tuple[int, dict[str, int]]:
        """How many distinct alerts the window folded, and how many of them each source sent."""
        scope = keys.storm_scope(route, severity)
        count = int(await cast(Awaitable[int], self._redis.scard(keys.incident_folded(scope, window))))
        raw = await cast(Awaitable[dict], self._redis.hgetall(keys.incident_folded_sources(scope, window)))
        return count, {as_text(k): int(as_text(v)) for k, v in raw.items()}

    async def claim_storm_message(self, route: str, severity: str, window: int, channel: str,
                                  ttl_seconds: int) -> tuple[bool, str, str]:
        """Claim the posting of the window's storm message, so two jobs never both post one:
        (True, channel, "") when this caller posts it; else (False, channel, ts) of the message,
        its ts "" while another job is posting it."""
        key = keys.incident_storm_message(keys.storm_scope(route, severity), window)
        if await self._redis.set(key, f"{channel}|", nx=True, ex=max(ttl_seconds, 60)):
            return True, channel, ""
        posted, _, ts = as_text(await self._redis.get(key) or "").partition("|")
        return False, posted, ts

    async def set_storm_message(self, route: str, severity: str, window: int, channel: str, ts: str) -> None:
        """The claimed storm message was posted: its ts, for the next job to edit it."""
        await self._redis.set(keys.incident_storm_message(keys.storm_scope(route, severity), window),
                              f"{channel}|{ts}", xx=True, keepttl=True)

    async def release_storm_message(self, route: str, severity: str, window: int, channel: str) -> None:
        """Let go of a claim whose message could not be posted, so a retry posts it."""
        await self._release_claim(keys=[keys.incident_storm_message(keys.storm_scope(route, severity), window)],
                                  args=[f"{channel}|"])
