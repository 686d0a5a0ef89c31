"""A job whose worker died (SIGKILL, OOM, a lost VM) is run again within seconds, not minutes.

arq marks a started job with an in-progress key that lasts the job timeout + 10 s and leaves the
job in its queue until it finishes; a worker that dies mid-job leaves both, and no worker may
start the job until the key expires (5 minutes with JOB_TIMEOUT=5m) — the lease just waits.

Here each worker process says it is alive (a key with a short TTL it refreshes) and records,
as each job starts (arq's on_job_start hook), that the job is its own; every beat records it
again for each job the worker is running, so a record that Redis did not take at the start (an
outage of a second, a failover) is there within a beat, and the job is never left to arq's
expiry of its in-progress key (5 minutes) if this worker then dies. Every heartbeat also
looks at the in-progress jobs: one still queued whose owner's liveness key has expired belongs
to a dead worker, and its in-progress key is deleted, so the next poll of any live worker starts
it again (arq counts the try; jobs are idempotent by design, and a lease's work is fenced by its
channel lock).

A record goes when its try ends (arq's after_job_end hook), if it still names this worker. Left
to its TTL (minutes), it would name this worker for the job's next try too, run by another worker
(a retried lease job: its lock was busy or lost, a 503): until that worker's start record replaces
it — a few milliseconds after arq marks the job in progress, or a beat later if Redis missed the
record — a sweep would take this worker's death for the death of the job's runner, and release a
job a live worker is running for a second worker to start beside it.

The job's channel lock would otherwise hold the rerun off until its TTL (LOCK_TTL, 60 s): a
worker's lock tokens name the worker (infra/state/locks.py), and the same heartbeat first
releases every lock whose owner's liveness key has expired, so the released job finds its
channel free. Locks are found by a SCAN of their key pattern, like the in-progress keys: the
lock stays one key set by one SET NX PX, with no per-worker index to keep in step with it (an
index would need its own writes on acquire and release, its own TTL and pruning, and the sweep
would still have to find the dead workers' indexes). The cost is a second pass over the
keyspace per beat, cheap at this bot's size (leases, locks, TTL'd dedupe markers).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from arq.constants import in_progress_key_prefix

from bot.redis_outage import is_redis_away
from infra.state import keys
from infra.state.locks import release_locks_of_dead_owners

log = logging.getLogger("tpubot.worker")

# Refreshed every HEARTBEAT; a worker silent for ALIVE_TTL (three missed beats) is taken for dead.
HEARTBEAT_SECONDS = 5.0
ALIVE_TTL_SECONDS = 15

# KEYS: in-progress, owner, queue. ARGV: job id, prefix of the liveness keys.
# The in-progress key goes only if the job is still queued (unfinished) and its owner is dead.
_RELEASE_IF_OWNER_DEAD = """
local owner = redis.call('GET', KEYS[2])
if not owner then return 0 end
if redis.call('EXISTS', ARGV[2] .. owner) == 1 then return 0 end
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('DEL', KEYS[2])
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""


# KEYS: the owner record. ARGV: this worker's id. A record that another worker wrote since is left.
_DROP_IF_MINE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True)
class Swept:
    """What one heartbeat took back from dead workers."""

    jobs: list[str]  # arq job ids released for another try
    locks: list[str]  # channel lock keys released


@dataclass
class JobOwnership:
    """One worker process's liveness and job ownership, and its sweep of dead workers' jobs."""

    queue_name: str
    owner_ttl_seconds: int  # as long as arq's in-progress key can last
    worker_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def alive_key(self) -> str:
        return keys.worker_alive(self.worker_id)

    async def job_started(self, pool, job_id: str) -> None:
        try:
            await pool.set(keys.job_owner(job_id), self.worker_id, ex=self.owner_ttl_seconds)
        except Exception as error:
            if not is_redis_away(error):
                raise
            # Unrecorded, the job falls back to arq's own expiry of its in-progress key if this worker dies.
            log.warning("could not record job %s as this worker's (%s)", job_id, error)

    async def job_ended(self, pool, job_id: str) -> None:
        """The try of `job_id` this worker ran is over (done, failed or re-queued): its record goes."""
        try:
            await pool.register_script(_DROP_IF_MINE)(keys=[keys.job_owner(job_id)], args=[self.worker_id])
        except Exception as error:
            if not is_redis_away(error):
                raise
            # Left behind, the record expires by its TTL (see the module docstring for the cost).
            log.warning("could not drop job %s's record as this worker's (%s)", job_id, error)

    async def beat(self, pool, running: Iterable[str] = ()) -> Swept:
        """Say this worker is alive and which jobs (`running`) are its own; release the channel
        locks, then the in-progress jobs, of dead ones."""
        await pool.set(self.alive_key(), "1", ex=ALIVE_TTL_SECONDS)
        running = list(running)
        if running:
            async with pool.pipeline(transaction=False) as pipe:
                for job_id in running:
                    pipe.set(keys.job_owner(job_id), self.worker_id, ex=self.owner_ttl_seconds)
                await pipe.execute()
        dead_prefix = keys.worker_alive("")
        # Locks first: a job released in this beat must not find its dead owner's lock still held.
        locks = await release_locks_of_dead_owners(pool, dead_prefix)
        for key in locks:
            log.warning("lock %s was held by a worker that died; released", key)
        release = pool.register_script(_RELEASE_IF_OWNER_DEAD)
        released = []
        async for key in pool.scan_iter(match=in_progress_key_prefix + "*", count=500):
            key = key.decode() if isinstance(key, bytes) else key
            job_id = key[len(in_progress_key_prefix):]
            if await release(keys=[key, keys.job_owner(job_id), self.queue_name], args=[job_id, dead_prefix]):
                released.append(job_id)
        for job_id in released:
            log.warning("job %s was running on a worker that died; released for another try", job_id)
        return Swept(jobs=released, locks=locks)

    async def run(self, pool, running: Callable[[], Iterable[str]] = tuple) -> None:
        """Beat until cancelled; a Redis outage only skips beats. `running()`: the ids of the jobs
        this worker is running now."""
        while True:
            try:
                await self.beat(pool, running())
            except Exception as error:  # the beat is retried; it must not end silently in its task
                current = asyncio.current_task()  # this coroutine's own task: never None here
                if current is not None and current.cancelling():
                    # A cancel that raced a Redis timeout came out as TimeoutError: still a stop.
                    raise asyncio.CancelledError("the worker is stopping") from error
                if not is_redis_away(error):
                    log.exception("the worker heartbeat failed; trying again in %ss", HEARTBEAT_SECONDS)
            await asyncio.sleep(HEARTBEAT_SECONDS)

    async def stopped(self, pool) -> None:
        """A worker stopping cleanly: its jobs were cancelled and re-queued by arq, so say so at once."""
        await pool.delete(self.alive_key())
