"""The channel's lease: its claim on exactly one TPU.

A lease is a Redis hash per (team, channel). Claiming is one Lua script, so any number of
concurrent `/tpu up` from any number of replicas create exactly one lease. Every later write
names the lease id it expects (a fenced write): a worker still holding an old lease's job
cannot touch the channel's new lease. A write from work that holds the channel's lock
(`ChannelLocks.hold`) also names the lock's token, checked in the same script: a worker that lost
the lock (it stalled past the TTL, another took the channel over) writes nothing and its work stops
with `LockLost`, however long it stalled after its last extension (infra/state/locks.py).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Awaitable, TypedDict, Unpack, cast, get_type_hints
# cast(Awaitable[...]): redis-py's asyncio client carries the sync client's `Awaitable[X] | X` types

from redis.asyncio import Redis

from infra.state import keys
from infra.state.locks import held_lock
from infra.state.replies import as_text

log = logging.getLogger(__name__)


# A StrEnum, so a state reads and formats as its stored name ("READY") wherever it is shown.
class LeaseState(StrEnum):
    PENDING = "PENDING"  # claimed; the provision job has not created the QR yet
    CREATING = "CREATING"
    WAITING_FOR_RESOURCES = "WAITING_FOR_RESOURCES"
    PROVISIONING = "PROVISIONING"
    ACTIVE = "ACTIVE"
    BOOTING_MODEL = "BOOTING_MODEL"
    READY = "READY"
    # Serving, but the boot probe's correctness checks failed (a wrong answer to a known question, or
    # tool calls that come back as text): the TPU and its clocks run as for READY, but mentions are
    # not routed to its model (agent/actions/model_endpoint.py).
    DEGRADED = "DEGRADED"
    FAILED = "FAILED"
    TEARING_DOWN = "TEARING_DOWN"

    @property
    def label(self) -> str:
        """How people read the state (cards, replies): words, one spelling everywhere."""
        return "REQUESTED" if self is LeaseState.PENDING else self.value.replace("_", " ")

    @property
    def holds_tpu(self) -> bool:
        return self in (LeaseState.ACTIVE, LeaseState.BOOTING_MODEL, LeaseState.READY, LeaseState.DEGRADED)


@dataclass
class Lease:
    lease_id: str
    team: str
    channel: str
    holder: str
    zone: str
    qr_id: str
    node_id: str
    state: LeaseState
    fence: int = 0
    created_at: float = 0.0
    deadline: float = 0.0  # the flex-start maxRunDuration end (epoch seconds); set at ACTIVE
    run_seconds: int = 0
    endpoint: str = ""
    card_channel: str = ""
    card_ts: str = ""
    detail: str = ""  # the last failure or progress note shown on the card
    state_since: float = 0.0
    active_at: float = 0.0
    watch_seq: int = 0
    torn_down_by: str = ""
    idle_since: float = 0.0  # the idle clock's start (agent/lease/idle.py); 0 = unknown (no metrics)
    # Zone search and model health (issue 3): an explicit `/tpu up ZONE` pins the zone (no search);
    # the search may continue over several job runs (`search_round`).
    zone_explicit: int = 0
    search_round: int = 0
    queued_at: float = 0.0  # when the accepted create returned (time to ACTIVE counts from here)
    valid_until: float = 0.0  # the queueing deadline: still WAITING then → FAILED (no capacity)
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    tokens_per_s: float = 0.0
    model_info: str = ""  # what answered the health check: model id and server fingerprint
    image: str = ""  # the vLLM container image the startup script ran (VLLM_IMAGE), shown on the READY card
    # What the VM says of its boot (guest attributes, infra/boot_phases.py): the phase, since when, warm/cold.
    boot_phase: str = ""
    boot_phase_since: float = 0.0
    boot_cache: str = ""
    boot_cache_note: str = ""  # why the cache is warm, cold or off (and whether it was saved)
    boot_retry: str = ""  # while a step before vLLM retries: why (HTTP status or Docker's line, try, wait)

    def __post_init__(self) -> None:
        # A lease built from a state's name (a test, an old caller) still holds the enum; an unknown name raises.
        self.state = LeaseState(self.state)

    @property
    def key(self) -> str:
        return keys.lease(self.team, self.channel)

    def to_redis(self) -> dict[str, str]:
        # Flat fields only, so no asdict (which deep-copies each value, in the ack path of /tpu up).
        return {f.name: _stored(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_redis(cls, raw: dict) -> "Lease":
        """The stored lease. Stored fields this version does not know are skipped here (and stay in
        Redis): a hash written by a newer or older version still reads; `unknown_fields` names them."""
        decoded = {as_text(k): as_text(v) for k, v in raw.items()}
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in decoded:
                continue
            value = decoded[f.name]
            if f.type in ("int", int):
                kwargs[f.name] = int(float(value or 0))
            elif f.type in ("float", float):
                kwargs[f.name] = float(value or 0)
            elif f.type in ("LeaseState", LeaseState):
                kwargs[f.name] = _state(value, decoded.get("lease_id", "?"))
            else:
                kwargs[f.name] = value
        return cls(**kwargs)


LEASE_FIELDS = frozenset(f.name for f in fields(Lease))
# Identity and fencing: written by the claim script only. An update naming one is refused.
FIXED_FIELDS = frozenset({"lease_id", "team", "channel", "fence"})


class LeaseChanges(TypedDict, total=False):
    """What a fenced update may write, field by field with its type (every lease field but FIXED_FIELDS;
    tests/test_lease_fields.py holds the two lists together)."""

    holder: str
    zone: str
    qr_id: str
    node_id: str
    state: LeaseState
    created_at: float
    deadline: float
    run_seconds: int
    endpoint: str
    card_channel: str
    card_ts: str
    detail: str
    state_since: float
    active_at: float
    watch_seq: int
    torn_down_by: str
    idle_since: float
    zone_explicit: int
    search_round: int
    queued_at: float
    valid_until: float
    ttft_ms: float
    tpot_ms: float
    tokens_per_s: float
    model_info: str
    image: str
    boot_phase: str
    boot_phase_since: float
    boot_cache: str
    boot_cache_note: str
    boot_retry: str


CHANGE_TYPES: dict[str, type] = get_type_hints(LeaseChanges)


def encoded_changes(changes: dict[str, object]) -> list[str]:
    """`changes` as the update script's flat name/value arguments; a TypeError names a field that is not
    a lease's (a typo would otherwise write a field nothing reads) or a value of the wrong type."""
    flat: list[str] = []
    for name, value in changes.items():
        kind = CHANGE_TYPES.get(name)
        if kind is None:
            why = "is fixed at the claim" if name in FIXED_FIELDS else "is not a lease field"
            raise TypeError(f"LeaseStore.update: {name!r} {why}; the fields it writes are "
                            f"{', '.join(sorted(CHANGE_TYPES))}")
        if not _is_a(value, kind):
            raise TypeError(f"LeaseStore.update: {name!r} takes {kind.__name__}, not {type(value).__name__} {value!r}")
        flat += [name, _stored(value)]
    return flat


def _is_a(value: object, kind: type) -> bool:
    if isinstance(value, bool):  # an int to Python, but it would be stored as "True"
        return False
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def unknown_fields(raw: dict, *, expected: frozenset[str] = frozenset()) -> set[str]:
    """The stored fields of a lease hash that this version's Lease does not have (besides `expected`)."""
    return {name for name in (as_text(k) for k in raw) if name not in LEASE_FIELDS and name not in expected}


def _stored(value: object) -> str:
    return value.value if isinstance(value, LeaseState) else str(value)


class UnknownLeaseState(ValueError):
    """A lease stored by a newer version (a roll-back): reading that one lease fails, not every read."""


def _state(value: str, lease_id: str) -> LeaseState:
    try:
        return LeaseState(value)
    except ValueError:
        raise UnknownLeaseState(f"lease {lease_id} is stored in state {value!r}, which this version does not know "
                         f"(it knows {', '.join(LeaseState)})") from None


def new_lease_id() -> str:
    # Lower-case hex keeps QR/node ids and label values within GCP's naming rules.
    return secrets.token_hex(5)


def candidate_lease(*, team: str, channel: str, holder: str, zone: str, run_seconds: int,
                    zone_explicit: bool) -> Lease:
    """A new PENDING lease as a claim proposes it (the claim script decides whether it is stored)."""
    lease_id = new_lease_id()
    now = time.time()
    return Lease(
        lease_id=lease_id, team=team, channel=channel, holder=holder, zone=zone,
        qr_id=qr_id_for(lease_id), node_id=node_id_for(lease_id), state=LeaseState.PENDING,
        created_at=now, state_since=now, run_seconds=run_seconds, zone_explicit=int(zone_explicit),
    )


def claim_fields(lease: Lease) -> list[str]:
    """The lease as the claim script's flat field/value arguments (the fence is the script's)."""
    flat: list[str] = []
    for name, value in lease.to_redis().items():
        if name != "fence":
            flat += [name, value]
    return flat


def qr_id_for(lease_id: str) -> str:
    return f"tpubot-{lease_id}"


def node_id_for(lease_id: str) -> str:
    return f"tpubot-{lease_id}-node"


_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGETALL', KEYS[1])}
end
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], unpack(ARGV))
redis.call('HSET', KEYS[1], 'fence', fence)
redis.call('SADD', KEYS[3], KEYS[1])
return {1, redis.call('HGETALL', KEYS[1])}
"""

# Write fields only if the stored lease is still the one the caller means and, for work under the
# channel's lock (ARGV[2] its token, '' for none), only while the lock is still that work's: -1 then.
_UPDATE = """
if redis.call('HGET', KEYS[1], 'lease_id') ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""
LOCK_REFUSED = -1  # what the update and release scripts return when the lock is no longer the caller's

# Releasing deletes the lease and, in the same step, leaves a note of the release that stays
# until everyone who must hear of it (the channel's card, the hooks) has: a crash between the
# release and those calls leaves the note, and the next run finishes the release from it. A copy
# stays as the channel's last release (how it ended, for `/tpu status`) for as long as a note may.
_RELEASE = """
if redis.call('HGET', KEYS[1], 'lease_id') ~= ARGV[1] then return 0 end
if ARGV[7] ~= '' and redis.call('GET', KEYS[6]) ~= ARGV[7] then return -1 end
local lease = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], KEYS[1])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], unpack(lease))
redis.call('HSET', KEYS[3], 'release_reason', ARGV[2], 'released_by', ARGV[3], 'released_at', ARGV[4],
           'tell_channel', ARGV[5])
redis.call('EXPIRE', KEYS[3], ARGV[6])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
redis.call('DEL', KEYS[5])
redis.call('HSET', KEYS[5], unpack(redis.call('HGETALL', KEYS[3])))
redis.call('EXPIRE', KEYS[5], ARGV[6])
return 1
"""
RELEASE_NOTE_TTL_SECONDS = 7 * 24 * 3600
RELEASE_FIELDS = frozenset({"release_reason", "released_by", "released_at", "tell_channel"})


@dataclass(frozen=True)
class Release:
    """A released lease whose channel card and hooks may not have heard of it yet."""

    lease: Lease
    reason: str
    by: str
    at: float
    tell_channel: bool  # False: the card keeps what it shows (a FAILED card is the record)

    @classmethod
    def from_redis(cls, raw: dict) -> "Release":
        decoded = {as_text(k): as_text(v) for k, v in raw.items()}
        return cls(Lease.from_redis(raw), decoded.get("release_reason", ""), decoded.get("released_by", ""),
                   float(decoded.get("released_at") or 0), decoded.get("tell_channel") == "1")


@dataclass(frozen=True)
class ClaimResult:
    created: bool
    lease: Lease


class LeaseStore:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._claim = redis.register_script(_CLAIM)
        self._update = redis.register_script(_UPDATE)
        self._release = redis.register_script(_RELEASE)
        self._unknown_said: set[str] = set()  # stored field names already logged as unknown

    def _read(self, raw: dict) -> Lease:
        lease = Lease.from_redis(raw)
        self._say_unknown(raw, lease.lease_id)
        return lease

    def _say_unknown(self, raw: dict, lease_id: str, *, expected: frozenset[str] = frozenset()) -> None:
        """Log (once per store and name) the stored fields Lease.from_redis skips: a deployment that rolls
        forward or back keeps reading its leases, and the log says what was left aside."""
        unknown = unknown_fields(raw, expected=expected) - self._unknown_said
        if unknown:
            self._unknown_said |= unknown
            log.warning("lease %s has stored fields this version does not know, left as they are: %s",
                        lease_id, ", ".join(sorted(unknown)))

    async def claim(self, *, team: str, channel: str, holder: str, zone: str, run_seconds: int,
                    zone_explicit: bool = False) -> ClaimResult:
        candidate = candidate_lease(team=team, channel=channel, holder=holder, zone=zone, run_seconds=run_seconds,
                                    zone_explicit=zone_explicit)
        created, raw = await self._claim(
            keys=[keys.lease(team, channel), keys.fence(team, channel), keys.lease_index()],
            args=claim_fields(candidate),
        )
        pairs = dict(zip(raw[::2], raw[1::2]))
        return ClaimResult(created=bool(created), lease=self._read(pairs))

    async def restore(self, lease: Lease) -> bool:
        """Recreate a lease from GCP's record (reconciler); never overwrites an existing one."""
        created, _ = await self._claim(
            keys=[keys.lease(lease.team, lease.channel), keys.fence(lease.team, lease.channel), keys.lease_index()],
            args=claim_fields(lease),
        )
        return bool(created)

    async def get(self, team: str, channel: str) -> Lease | None:
        raw = await cast(Awaitable[dict], self._redis.hgetall(keys.lease(team, channel)))
        return self._read(raw) if raw else None

    async def get_by_id(self, team: str, channel: str, lease_id: str) -> Lease | None:
        lease = await self.get(team, channel)
        return lease if lease and lease.lease_id == lease_id else None

    async def update(self, lease: Lease, **changes: Unpack[LeaseChanges]) -> Lease | None:
        """Fenced write of `changes`; returns the updated lease, or None if it was replaced or released.
        A field that is not a lease's, or a value of the wrong type, is a TypeError and writes nothing;
        so is a write from work whose channel lock another holder took over, with `LockLost`."""
        if "state" in changes and changes["state"] != lease.state:
            changes.setdefault("state_since", time.time())
        flat = encoded_changes(dict(changes))
        lock = held_lock(lease.team, lease.channel)
        done = await self._update(keys=[lease.key, keys.lock(lease.team, lease.channel)],
                                  args=[lease.lease_id, lock.token if lock else "", *flat])
        if done == LOCK_REFUSED and lock is not None:
            raise lock.write_refused()
        if not done:
            return None
        return await self.get_by_id(lease.team, lease.channel, lease.lease_id)

    async def release(self, lease: Lease, *, reason: str = "", by: str = "", tell_channel: bool = True) -> Release | None:
        """Fenced release; returns the note to finish it from, or None if it was not this caller's to release.
        From work whose channel lock another holder took over: `LockLost`, nothing released."""
        release = Release(lease, reason, by, time.time(), tell_channel)
        lock = held_lock(lease.team, lease.channel)
        released = await self._release(
            keys=[lease.key, keys.lease_index(), keys.release_note(lease.lease_id), keys.release_notes(),
                  keys.last_release(lease.team, lease.channel), keys.lock(lease.team, lease.channel)],
            args=[lease.lease_id, reason, by, repr(release.at), "1" if tell_channel else "0", RELEASE_NOTE_TTL_SECONDS,
                  lock.token if lock else ""],
        )
        if released == LOCK_REFUSED and lock is not None:
            raise lock.write_refused()
        return release if released else None

    async def last_release(self, team: str, channel: str) -> Release | None:
        """How the channel's last lease ended (kept RELEASE_NOTE_TTL_SECONDS), or None."""
        raw = await cast(Awaitable[dict], self._redis.hgetall(keys.last_release(team, channel)))
        if not raw:
            return None
        try:
            return Release.from_redis(raw)
        except UnknownLeaseState as error:
            log.warning("skipped a last release this version cannot read: %s", error)
            return None

    async def unfinished_release(self, lease_id: str) -> Release | None:
        raw = await cast(Awaitable[dict], self._redis.hgetall(keys.release_note(lease_id)))
        if not raw:
            return None
        release = Release.from_redis(raw)
        self._say_unknown(raw, release.lease.lease_id, expected=RELEASE_FIELDS)
        return release

    async def unfinished_releases(self, *, released_before: float) -> list[Release]:
        found = []
        for lease_id in await self._redis.zrangebyscore(keys.release_notes(), "-inf", released_before):
            try:
                release = await self.unfinished_release(as_text(lease_id))
            except UnknownLeaseState as error:
                log.warning("skipped a release note this version cannot read: %s", error)
                continue
            if release is None:  # the note expired
                await self._redis.zrem(keys.release_notes(), lease_id)
            else:
                found.append(release)
        return found

    async def release_finished(self, lease_id: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.release_note(lease_id))
            pipe.zrem(keys.release_notes(), lease_id)
            await pipe.execute()

    async def all(self) -> list[Lease]:
        members = await cast(Awaitable[set], self._redis.smembers(keys.lease_index()))
        leases = []
        for member in sorted(as_text(m) for m in members):
            raw = await cast(Awaitable[dict], self._redis.hgetall(member))
            if raw:
                try:
                    leases.append(self._read(raw))
                except UnknownLeaseState as error:
                    # The reconciler, watchers and Home tab go on for every other lease.
                    log.warning("skipped a lease this version cannot read: %s", error)
            else:
                await cast(Awaitable[int], self._redis.srem(keys.lease_index(), member))
        return leases
