"""Per-channel operation lock: SET NX PX with a random token, released and extended only
by the holder of the token (compare-and-delete / compare-and-expire scripts), TTL always.

A holder that says who it is (a worker process, by its id) takes tokens `<owner>.<random hex>`,
so a lock whose owner has provably died (its liveness key gone) can be released by a sweep in
seconds rather than by its TTL (bot/orphaned_jobs.py). Plain tokens (the web process, the CLI)
name no owner and are left to their TTL.

A holder can lose its lock while it still runs: a process that stalls longer than the TTL (or
than the sweep's idea of a dead worker), a Redis outage longer than the TTL. Work done after that
is done without the lock, beside whoever took it over. `hold` is how guarded work runs: the lock
is kept extended while the work runs, and the moment it is known lost — an extension refused, or
the TTL passed since the last one that succeeded (a stall: the process cannot know what happened
meanwhile) — the work is cancelled at its next await and `hold` raises `LockLost`. Work that is
about to act (a create, a release) also calls `HeldLock.extend()`, which asks Redis, so it never
acts on a lock it no longer has.

An extension still leaves a window: the process can stall between it and the act, past the TTL,
while another worker takes the channel over. So the lease's own writes close it: `hold` makes its
lock the current one for its channel in the work's context (`held_lock`), and every update or
release of that channel's lease from inside the work carries the lock's token and is refused in
the same Redis script, with nothing written, once the lock holds another token
(infra/state/leases.py). The work stops there with `LockLost`. Being implicit, it also covers writes
made deep inside the work (the status card's ts, written by the notifier), which an argument passed
by hand would miss.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from contextlib import asynccontextmanager
from contextvars import ContextVar
from collections.abc import AsyncIterator

from redis.exceptions import RedisError

from redis.asyncio import Redis

from infra.state import keys
from infra.state.replies import as_text

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: the lock. ARGV: the liveness-key prefix. Compare-and-delete in one step: the lock goes
# only if its token names an owner and that owner's liveness key is gone.
_RELEASE_IF_OWNER_DEAD = """
local token = redis.call('GET', KEYS[1])
if not token then return 0 end
local dot = string.find(token, '.', 1, true)
if not dot or dot == 1 then return 0 end
if redis.call('EXISTS', ARGV[1] .. string.sub(token, 1, dot - 1)) == 1 then return 0 end
return redis.call('DEL', KEYS[1])
"""
OWNER_SEPARATOR = "."  # the script above splits on it; worker ids are hex, plain tokens have none
_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


log = logging.getLogger(__name__)

# Waits between tries of releasing a lock after its work (about 1.5 s in all); then its TTL frees it.
RELEASE_RETRY_DELAYS = (0.1, 0.3, 1.0)
# A held lock is extended this often (a fraction of its TTL): two extensions can fail before it lapses.
EXTEND_EVERY = 1 / 3


class LockNotAcquired(Exception):
    """Another operation holds this channel's lock."""


class LockLost(Exception):
    """The lock this work ran under expired or was taken over; the work was stopped."""


# The locks `hold` holds in this task (and the tasks it starts), innermost last.
_HELD: ContextVar[tuple["HeldLock", ...]] = ContextVar("tpubot_held_locks", default=())


def held_lock(team: str, channel: str) -> "HeldLock | None":
    """The lock `ChannelLocks.hold` holds on this channel for the running work, or None outside it."""
    for held in reversed(_HELD.get()):
        if held.team == team and held.channel == channel:
            return held
    return None


class HeldLock:
    """A lock held by `ChannelLocks.hold`: kept extended, and its work cancelled once it is lost."""

    def __init__(self, locks: "ChannelLocks", team: str, channel: str, token: str, ttl_ms: int,
                 work: asyncio.Task) -> None:
        self.team, self.channel, self.token = team, channel, token
        self._locks = locks
        self._ttl = ttl_ms / 1000
        self._loop = asyncio.get_running_loop()
        self._work = work
        self._cancelled_work = False  # the work was cancelled by the lock (not from outside)
        self._lapse: asyncio.TimerHandle | None = None
        self.lost_because = ""  # set once the lock is known lost
        self._valid_until(self._loop.time() + self._ttl)

    @property
    def where(self) -> str:
        return f"{self.team}/{self.channel}"

    async def extend(self) -> None:
        """Extend the lock now; `LockLost` if it is no longer this holder's."""
        if self.lost_because:
            raise LockLost(f"{self.where}: {self.lost_because}")
        asked = self._loop.time()
        if not await self._locks.extend(self.team, self.channel, self.token, int(self._ttl * 1000)):
            self._lost("another holder has it, or it expired")
            raise LockLost(f"{self.where}: {self.lost_because}")
        self._valid_until(asked + self._ttl)

    def write_refused(self) -> LockLost:
        """A fenced write found the channel's lock holding another token: the lock is lost, and the
        error to raise (`hold` turns it into its own `LockLost`, the work stopped)."""
        self._lost("another holder has it, or it expired (a write of the lease was refused)")
        return LockLost(f"{self.where}: {self.lost_because}")

    def _valid_until(self, when: float) -> None:
        """The lock lapses at `when` (loop time) unless extended before: the work is stopped then."""
        if self._lapse is not None:
            self._lapse.cancel()
        self._lapse = self._loop.call_at(when, self._stop_work, f"not extended within its {self._ttl:g}s TTL")

    def _lost(self, why: str) -> None:
        if not self.lost_because:
            self.lost_because = why
            log.warning("lost the lock on %s (%s): stopping the work it guarded", self.where, why)

    def _stop_work(self, why: str) -> None:
        """From outside the work (the lapse timer, the keeper): cancel it at its next await."""
        self._lost(why)
        if not self._cancelled_work and not self._work.done():
            self._cancelled_work = True
            self._work.cancel(f"lost the lock on {self.where}")

    async def _keep(self) -> None:
        """Extend every third of the TTL until cancelled; a Redis error is retried (the lapse timer
        still runs, so an outage longer than the TTL ends the work)."""
        while not self.lost_because:
            await asyncio.sleep(self._ttl * EXTEND_EVERY)
            try:
                await self.extend()
            except LockLost:
                self._stop_work(self.lost_because)
                return
            except (RedisError, OSError, asyncio.TimeoutError) as error:
                log.warning("could not extend the lock on %s (%s); trying again", self.where, error)

    async def _take_back_the_cancel(self, delivered: bool) -> bool:
        """Undo the lock's own cancel of the work (`delivered`: the work is stopping on a
        CancelledError); False if a cancel from outside is the one stopping it, or is pending too
        (a shutdown, a job timeout: that one must go on)."""
        if not self._cancelled_work:
            return not delivered
        if not delivered:
            try:  # requested but not yet thrown into the work: let it land here, not at the next await
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                pass
        return self._work.uncancel() == 0

    def _stop(self) -> None:
        if self._lapse is not None:
            self._lapse.cancel()


class ChannelLocks:
    def __init__(self, redis: Redis, ttl_ms: int = 60_000, owner: str | None = None) -> None:
        if owner is not None and (not owner or OWNER_SEPARATOR in owner):
            raise ValueError(f"a lock owner is a non-empty id without {OWNER_SEPARATOR!r}, not {owner!r}")
        self._redis = redis
        self._ttl_ms = ttl_ms
        self._owner = owner
        self._release = redis.register_script(_RELEASE)
        self._extend = redis.register_script(_EXTEND)

    async def acquire(self, team: str, channel: str, ttl_ms: int | None = None) -> str | None:
        token = secrets.token_hex(16)
        if self._owner is not None:
            token = f"{self._owner}{OWNER_SEPARATOR}{token}"
        ok = await self._redis.set(keys.lock(team, channel), token, nx=True, px=ttl_ms or self._ttl_ms)
        return token if ok else None

    async def release(self, team: str, channel: str, token: str) -> bool:
        return bool(await self._release(keys=[keys.lock(team, channel)], args=[token]))

    async def extend(self, team: str, channel: str, token: str, ttl_ms: int | None = None) -> bool:
        return bool(await self._extend(keys=[keys.lock(team, channel)], args=[token, ttl_ms or self._ttl_ms]))

    async def holder_token(self, team: str, channel: str) -> str | None:
        value = await self._redis.get(keys.lock(team, channel))
        return None if value is None else as_text(value)

    async def remaining_seconds(self, team: str, channel: str) -> float:
        """How long until the current holder's lock expires (0 if free)."""
        ttl_ms = await self._redis.pttl(keys.lock(team, channel))
        return max(0.0, ttl_ms / 1000) if ttl_ms and ttl_ms > 0 else 0.0

    async def force_unlock(self, team: str, channel: str) -> bool:
        """Admin escape hatch; callers must check the actor is an admin."""
        return bool(await self._redis.delete(keys.lock(team, channel)))

    @asynccontextmanager
    async def hold(self, team: str, channel: str, ttl_ms: int | None = None) -> AsyncIterator[HeldLock]:
        """Run the block under the channel's lock (`LockNotAcquired` if another holds it), kept
        extended while it runs; once the lock is lost the block is cancelled and `LockLost` raised."""
        ttl = ttl_ms or self._ttl_ms
        token = await self.acquire(team, channel, ttl)
        if token is None:
            raise LockNotAcquired(f"{team}/{channel}")
        work = asyncio.current_task()
        if work is None:
            raise RuntimeError("ChannelLocks.hold runs inside a task")
        held = HeldLock(self, team, channel, token, ttl, work)
        keeper = asyncio.create_task(held._keep(), name=f"lock-keeper {team}/{channel}")
        current = _HELD.set((*_HELD.get(), held))
        try:
            yield held
        except (asyncio.CancelledError, LockLost) as stopped:
            if held.lost_because and await held._take_back_the_cancel(isinstance(stopped, asyncio.CancelledError)):
                raise LockLost(f"{held.where}: {held.lost_because}") from stopped
            raise  # a cancel from outside (shutdown, job timeout) stays one
        finally:
            _HELD.reset(current)
            held._stop()
            keeper.cancel()
            await self._release_soon(team, channel, token)

    async def _release_soon(self, team: str, channel: str, token: str) -> None:
        """Release after the work, through a short Redis blip; a longer one leaves the lock to its TTL
        (logged), rather than turning finished work into an error of the job."""
        for wait in (*RELEASE_RETRY_DELAYS, None):
            try:
                await self.release(team, channel, token)
                return
            except (RedisError, OSError, asyncio.TimeoutError) as error:
                if wait is None:
                    log.warning("could not release the lock on %s/%s (%s); it expires by its TTL", team, channel,
                                error)
                    return
            await asyncio.sleep(wait)


async def release_locks_of_dead_owners(redis: Redis, alive_prefix: str, *, scan_count: int = 500) -> list[str]:
    """Release every lock whose token names an owner without a key `alive_prefix + owner`: a
    process that died holding it. Live owners' and plain tokens' locks are untouched. The
    released lock keys."""
    release = redis.register_script(_RELEASE_IF_OWNER_DEAD)
    released = []
    async for key in redis.scan_iter(match=keys.lock_pattern(), count=scan_count):
        if await release(keys=[key], args=[alive_prefix]):
            released.append(as_text(key))
    return released
