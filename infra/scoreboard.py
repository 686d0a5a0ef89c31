"""The zone scoreboard: what each zone did with our create requests, kept in Redis with TTLs.

It is state, never documentation: a zone ranks high because it recently took a request (and
went ACTIVE quickly), not because a table says it offers flex-start. Per accelerator type:

- every create attempt is recorded (zone, outcome class, when; time to ACTIVE once known);
  outcome classes are `accepted`, `active` and the `infra.tpu_errors.TpuErrorKind` values;
- a zone or region gets a skip-until from `TpuErrorKind.suggested_skip` (FLEX_START not offered →
  days, no capacity → minutes, quota → the whole region for an hour);
- the same unclassified error text from several zones is counted, because an error that follows
  a request from zone to zone is a configuration problem (`same_error_zones`);
- whether a zone offers the accelerator at all (from the TPU API's acceleratorTypes list) is cached.

Quota is deliberately absent: a non-zero quota says nothing about FLEX_START support or capacity.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable, Iterable, Literal

from redis.asyncio import Redis

from infra.state import keys
from infra.state.replies import as_text
from infra.tpu_errors import ErrorScope, TpuError, region_of

ACCEPTED = "accepted"  # the create went through: the QR exists (queued or provisioning)
ACTIVE = "active"  # a QR in this zone reached ACTIVE (carries the time it took)
# Only ACTIVE is a success: an accepted QR may wait for capacity for hours, and one torn down
# while waiting says the zone had none, not that it is a good first choice.
SUCCESS_OUTCOMES = frozenset({ACTIVE})

_PREFIX = f"{keys.PREFIX}:zones"
# Texts that differ between zones or calls but not between causes: zone names, EIDs, ids, numbers.
_VOLATILE = re.compile(r"[a-z]+-[a-z]+\d+(?:-[a-z])?|\[EID: [^\]]*\]|0x[0-9a-f]+|\b[0-9a-f]{8,}\b|\d+")


# Per zone, in KEYS order: offers (GET), attempts (LRANGE), zone skip (GET), region skip (GET).
_READ_ROWS = """
local out = {}
for i = 1, #KEYS, 4 do
  out[i] = redis.call('GET', KEYS[i])
  out[i + 1] = redis.call('LRANGE', KEYS[i + 1], 0, -1)
  out[i + 2] = redis.call('GET', KEYS[i + 2])
  out[i + 3] = redis.call('GET', KEYS[i + 3])
end
return out
"""


@dataclass(frozen=True)
class Attempt:
    zone: str
    outcome: str
    at: float
    lease_id: str = ""
    seconds_to_active: float | None = None
    message: str = ""

    def to_json(self) -> str:
        return json.dumps({"zone": self.zone, "outcome": self.outcome, "at": self.at, "lease_id": self.lease_id,
                           "seconds_to_active": self.seconds_to_active, "message": self.message[:300]})

    @classmethod
    def from_json(cls, raw: bytes | str) -> "Attempt":
        data = json.loads(raw)
        return cls(zone=data["zone"], outcome=data["outcome"], at=float(data["at"]),
                   lease_id=data.get("lease_id", ""), seconds_to_active=data.get("seconds_to_active"),
                   message=data.get("message", ""))

    @property
    def succeeded(self) -> bool:
        return self.outcome in SUCCESS_OUTCOMES


SkipScope = Literal["zone", "region"]


@dataclass(frozen=True)
class Skip:
    until: float
    outcome: str
    scope: SkipScope


@dataclass
class ZoneRow:
    """One line of `/tpu zones`."""

    zone: str
    offers: bool | None  # the zone lists the accelerator type; None = not looked up yet
    attempts: int = 0
    last_outcome: str = ""
    last_at: float = 0.0
    median_seconds_to_active: float | None = None
    successes: int = 0
    last_success_at: float = 0.0
    skip: Skip | None = None
    history: list[Attempt] = field(default_factory=list)


@dataclass(frozen=True)
class ZoneOrder:
    """The zones a search should try, best-known first, and why the others are left out."""

    order: list[str]
    skipped: list[tuple[str, Skip]]
    not_offered: list[str]


class ZoneScoreboard:
    def __init__(
        self,
        redis: Redis,
        accelerator: str,
        *,
        history: int = 50,
        ttl: timedelta = timedelta(days=30),
        offers_ttl: timedelta = timedelta(days=1),
        same_error_window: timedelta = timedelta(hours=1),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = redis
        self.accelerator = accelerator
        self._history = history
        self._ttl = int(ttl.total_seconds())
        self._offers_ttl = int(offers_ttl.total_seconds())
        self._same_error_window = int(same_error_window.total_seconds())
        self._clock = clock
        self._read_rows = redis.register_script(_READ_ROWS)

    # --- keys -------------------------------------------------------------------------------
    def _attempts_key(self, zone: str) -> str:
        return f"{_PREFIX}:{self.accelerator}:attempts:{zone}"

    def _skip_key(self, scope: SkipScope, where: str) -> str:
        return f"{_PREFIX}:{self.accelerator}:skip-{scope}:{where}"

    def _offers_key(self, zone: str) -> str:
        return f"{_PREFIX}:{self.accelerator}:offers:{zone}"

    def _same_error_key(self, message: str) -> str:
        digest = hashlib.sha1(error_signature(message).encode()).hexdigest()[:16]
        return f"{_PREFIX}:{self.accelerator}:unclassified:{digest}"

    # --- recording --------------------------------------------------------------------------
    async def record(self, attempt: Attempt) -> None:
        key = self._attempts_key(attempt.zone)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.lpush(key, attempt.to_json())
            pipe.ltrim(key, 0, self._history - 1)
            pipe.expire(key, self._ttl)
            await pipe.execute()

    async def record_accepted(self, zone: str, lease_id: str = "") -> None:
        await self.record(Attempt(zone, ACCEPTED, self._clock(), lease_id))
        # Evidence that the zone takes requests again ends an earlier skip.
        await self._redis.delete(self._skip_key("zone", zone))

    async def record_active(self, zone: str, seconds: float, lease_id: str = "") -> None:
        await self.record(Attempt(zone, ACTIVE, self._clock(), lease_id, seconds_to_active=max(0.0, seconds)))

    async def record_error(self, zone: str, error: TpuError, lease_id: str = "") -> Skip | None:
        """Record a failed attempt and apply the skip its kind suggests; returns that skip."""
        now = self._clock()
        await self.record(Attempt(zone, error.kind.value, now, lease_id, message=error.message))
        skip_for = error.kind.suggested_skip
        if skip_for is None:
            return None
        scope: SkipScope = "region" if error.kind.scope is ErrorScope.REGION else "zone"
        where = (error.region or region_of(zone)) if scope == "region" else zone
        skip = Skip(until=now + skip_for.total_seconds(), outcome=error.kind.value, scope=scope)
        await self._redis.set(self._skip_key(scope, where), json.dumps(skip.__dict__),
                              px=max(1, int(skip_for.total_seconds() * 1000)))
        return skip

    async def same_error_zones(self, zone: str, message: str) -> list[str]:
        """Note an unclassified error in `zone`; returns every zone that recently gave the same one."""
        key = self._same_error_key(message)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, zone, str(self._clock()))
            pipe.expire(key, self._same_error_window)
            pipe.hkeys(key)
            *_, zones = await pipe.execute()
        return sorted(as_text(z) for z in zones)

    async def set_offers(self, zone: str, offered: bool) -> None:
        await self._redis.set(self._offers_key(zone), "1" if offered else "0", ex=self._offers_ttl)

    # --- reading ----------------------------------------------------------------------------
    async def offers(self, zones: Iterable[str]) -> dict[str, bool | None]:
        zones = list(zones)
        if not zones:
            return {}
        values = await self._redis.mget([self._offers_key(z) for z in zones])
        return {z: None if v is None else as_text(v) == "1" for z, v in zip(zones, values)}

    async def rows(self, zones: Iterable[str]) -> list[ZoneRow]:
        zones = list(dict.fromkeys(zones))
        # One command for every zone: `/tpu up` orders zones inside Slack's 3-second ack window,
        # and a script costs the client one command to send and parse where a pipeline costs 4 a zone.
        zone_keys = [key for zone in zones for key in (
            self._offers_key(zone), self._attempts_key(zone), self._skip_key("zone", zone),
            self._skip_key("region", region_of(zone)))]
        replies = await self._read_rows(keys=zone_keys) if zone_keys else []
        now = self._clock()
        rows = []
        for i, zone in enumerate(zones):
            offered, raw_history, zone_skip, region_skip = replies[4 * i:4 * i + 4]
            history = [Attempt.from_json(raw) for raw in raw_history]
            live = [s for s in (Skip(**json.loads(raw)) for raw in (zone_skip, region_skip) if raw is not None)
                    if s.until > now]
            row = ZoneRow(zone=zone, offers=None if offered is None else as_text(offered) == "1", attempts=len(history),
                          history=history, skip=max(live, key=lambda s: s.until) if live else None)
            if history:
                row.last_outcome, row.last_at = history[0].outcome, history[0].at
            times = [a.seconds_to_active for a in history if a.seconds_to_active is not None]
            row.median_seconds_to_active = statistics.median(times) if times else None
            successes = [a for a in history if a.succeeded]
            row.successes = len(successes)
            row.last_success_at = successes[0].at if successes else 0.0
            rows.append(row)
        return rows

    async def order(self, zones: Iterable[str], default_zone: str = "") -> ZoneOrder:
        """Best-known first among `zones`: leaves out skipped zones and zones known not to offer the type.

        1. zones whose latest attempt reached ACTIVE — fastest median time to ACTIVE first;
        2. zones that reached ACTIVE before but not since (failed, or accepted and never ACTIVE) — most
           recent success first;
        3. zones never tried — the configured default first, then in configured order;
        4. zones that never reached ACTIVE (failed with the skip over, or accepted and left waiting) —
           the longest-ago attempt first.
        """
        rows = await self.rows(zones)
        position = {row.zone: i for i, row in enumerate(rows)}
        order, skipped, not_offered = [], [], []
        for row in rows:
            if row.offers is False:
                not_offered.append(row.zone)
            elif row.skip is not None:
                skipped.append((row.zone, row.skip))
            else:
                order.append(row)

        def rank(row: ZoneRow) -> tuple:
            if row.last_outcome in SUCCESS_OUTCOMES:
                median = row.median_seconds_to_active
                return (0, median if median is not None else float("inf"), -row.last_success_at)
            if row.successes:
                return (1, -row.last_success_at, 0)
            if not row.attempts:
                return (2, 0 if row.zone == default_zone else 1, position[row.zone])
            return (3, row.last_at, position[row.zone])

        order.sort(key=rank)
        skipped.sort(key=lambda item: item[1].until)
        return ZoneOrder([row.zone for row in order], skipped, not_offered)


def error_signature(message: str) -> str:
    """An error text with its zone names, ids and numbers blanked, so one cause reads the same everywhere."""
    return _VOLATILE.sub("#", message.lower()).strip()
