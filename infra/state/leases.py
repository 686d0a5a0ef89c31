"""The channel's lease: its claim on exactly one TPU.

A lease is a Redis hash per (team, channel). Claiming is one Lua script, so any number of
concurrent `/tpu up` from any number of replicas create exactly one lease. Every later write
names the lease id it expects (a fenced write): a worker still holding an old lease's job
cannot touch the channel's new lease.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, fields
from enum import Enum

from redis.asyncio import Redis

from infra.state import keys


class LeaseState(str, Enum):
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
    state: str
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

    @property
    def key(self) -> str:
        return keys.lease(self.team, self.channel)

    @property
    def lease_state(self) -> LeaseState:
        return LeaseState(self.state)

    def to_redis(self) -> dict[str, str]:
        # Flat fields only, so no asdict (which deep-copies each value, in the ack path of /tpu up).
        return {f.name: str(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_redis(cls, raw: dict) -> "Lease":
        decoded = {_text(k): _text(v) for k, v in raw.items()}
        kwargs = {}
        for f in fields(cls):
            if f.name not in decoded:
                continue
            value = decoded[f.name]
            if f.type in ("int", int):
                kwargs[f.name] = int(float(value or 0))
            elif f.type in ("float", float):
                kwargs[f.name] = float(value or 0)
            else:
                kwargs[f.name] = value
        return cls(**kwargs)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


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
        qr_id=qr_id_for(lease_id), node_id=node_id_for(lease_id), state=LeaseState.PENDING.value,
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

# Write fields only if the stored lease is still the one the caller means.
_UPDATE = """
if redis.call('HGET', KEYS[1], 'lease_id') ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""

# Releasing deletes the lease and, in the same step, leaves a note of the release that stays
# until everyone who must hear of it (the channel's card, the hooks) has: a crash between the
# release and those calls leaves the note, and the next run finishes the release from it.
_RELEASE = """
if redis.call('HGET', KEYS[1], 'lease_id') ~= ARGV[1] then return 0 end
local lease = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], KEYS[1])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], unpack(lease))
redis.call('HSET', KEYS[3], 'release_reason', ARGV[2], 'released_by', ARGV[3], 'released_at', ARGV[4],
           'tell_channel', ARGV[5])
redis.call('EXPIRE', KEYS[3], ARGV[6])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
return 1
"""
RELEASE_NOTE_TTL_SECONDS = 7 * 24 * 3600


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
        decoded = {_text(k): _text(v) for k, v in raw.items()}
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

    async def claim(self, *, team: str, channel: str, holder: str, zone: str, run_seconds: int,
                    zone_explicit: bool = False) -> ClaimResult:
        candidate = candidate_lease(team=team, channel=channel, holder=holder, zone=zone, run_seconds=run_seconds,
                                    zone_explicit=zone_explicit)
        created, raw = await self._claim(
            keys=[keys.lease(team, channel), keys.fence(team, channel), keys.lease_index()],
            args=claim_fields(candidate),
        )
        pairs = dict(zip(raw[::2], raw[1::2]))
        return ClaimResult(created=bool(created), lease=Lease.from_redis(pairs))

    async def restore(self, lease: Lease) -> bool:
        """Recreate a lease from GCP's record (reconciler); never overwrites an existing one."""
        created, _ = await self._claim(
            keys=[keys.lease(lease.team, lease.channel), keys.fence(lease.team, lease.channel), keys.lease_index()],
            args=claim_fields(lease),
        )
        return bool(created)

    async def get(self, team: str, channel: str) -> Lease | None:
        raw = await self._redis.hgetall(keys.lease(team, channel))
        return Lease.from_redis(raw) if raw else None

    async def get_by_id(self, team: str, channel: str, lease_id: str) -> Lease | None:
        lease = await self.get(team, channel)
        return lease if lease and lease.lease_id == lease_id else None

    async def update(self, lease: Lease, **changes: object) -> Lease | None:
        """Fenced write of `changes`; returns the updated lease, or None if it was replaced or released."""
        if "state" in changes and changes["state"] != lease.state:
            changes.setdefault("state_since", time.time())
        args: list[str] = [lease.lease_id]
        for name, value in changes.items():
            args += [name, value.value if isinstance(value, Enum) else str(value)]
        ok = await self._update(keys=[lease.key], args=args)
        if not ok:
            return None
        return await self.get_by_id(lease.team, lease.channel, lease.lease_id)

    async def release(self, lease: Lease, *, reason: str = "", by: str = "", tell_channel: bool = True) -> Release | None:
        """Fenced release; returns the note to finish it from, or None if it was not this caller's to release."""
        release = Release(lease, reason, by, time.time(), tell_channel)
        released = await self._release(
            keys=[lease.key, keys.lease_index(), keys.release_note(lease.lease_id), keys.release_notes()],
            args=[lease.lease_id, reason, by, repr(release.at), "1" if tell_channel else "0", RELEASE_NOTE_TTL_SECONDS],
        )
        return release if released else None

    async def unfinished_release(self, lease_id: str) -> Release | None:
        raw = await self._redis.hgetall(keys.release_note(lease_id))
        return Release.from_redis(raw) if raw else None

    async def unfinished_releases(self, *, released_before: float) -> list[Release]:
        found = []
        for lease_id in await self._redis.zrangebyscore(keys.release_notes(), "-inf", released_before):
            release = await self.unfinished_release(_text(lease_id))
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
        members = await self._redis.smembers(keys.lease_index())
        leases = []
        for member in sorted(_text(m) for m in members):
            raw = await self._redis.hgetall(member)
            if raw:
                leases.append(Lease.from_redis(raw))
            else:
                await self._redis.srem(keys.lease_index(), member)
        return leases
