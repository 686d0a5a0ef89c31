"""The durable job queue (arq on Redis). Jobs carry deterministic ids, so enqueueing the same
work twice — a retried request, a second replica, a restarted worker — is a no-op."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms, to_ms, to_unix_ms

QUEUE_NAME = "arq:queue:tpubot"

# arq's enqueue_job, in one round trip instead of three (WATCH; EXISTS; MULTI PSETEX ZADD EXEC):
# the same keys, the same serialized job and the same "no-op if the job or its result exists",
# made atomic by the script instead of by WATCH. Enqueueing sits inside Slack's ack window
# (a mention, /tpu up, a teardown click), where each round trip counts under a burst.
# KEYS: job, result, queue. ARGV: expiry (ms), serialized job, score, job id. 0 = queued, -1 = exists.
_QUEUE_JOB = """
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return -1 end
redis.call('PSETEX', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return 0
"""
# The same, behind first-seen markers (KEYS[4..], kept ARGV[5] seconds): every marker is set,
# and the job is queued only if none was set before; k > 0 = marker k had been seen.
_QUEUE_FIRST_DELIVERY = """
local seen = 0
for i = 4, #KEYS do
  if not redis.call('SET', KEYS[i], '1', 'NX', 'EX', ARGV[5]) and seen == 0 then seen = i - 3 end
end
if seen > 0 then return seen end
""" + _QUEUE_JOB


class JobQueue:
    def __init__(self, pool: ArqRedis, queue_name: str = QUEUE_NAME) -> None:
        self._pool = pool
        self._queue_name = queue_name
        self._queue_job = pool.register_script(_QUEUE_JOB)
        self._queue_first_delivery = pool.register_script(_QUEUE_FIRST_DELIVERY)

    async def enqueue(
        self,
        function: str,
        *,
        job_id: str,
        defer_until: datetime | None = None,
        defer_by: timedelta | None = None,
        **kwargs: Any,
    ) -> bool:
        """True if this call queued the job, False if a job with this id already exists."""
        job_keys, job_args = self._job(function, job_id, defer_until, defer_by, kwargs)
        return await self._queue_job(keys=job_keys, args=job_args) == 0

    async def enqueue_first_delivery(self, function: str, *, job_id: str, markers: list[str], marker_ttl: int,
                                     **kwargs: Any) -> int:
        """Queue the job unless one of the first-seen `markers` (Redis keys) was set before; all
        are set in the same atomic step, so a delivery is never marked seen without its job.

        0: queued; k > 0: markers[k - 1] had been seen; -1: the job already exists.
        """
        job_keys, job_args = self._job(function, job_id, None, None, kwargs)
        return int(await self._queue_first_delivery(keys=job_keys + markers, args=job_args + [marker_ttl]))

    def _job(self, function: str, job_id: str, defer_until: datetime | None, defer_by: timedelta | None,
             kwargs: dict[str, Any]) -> tuple[list[str], list[bytes | str | int]]:
        if defer_until and defer_by:
            raise ValueError("use either defer_until or defer_by, not both")
        now_ms = timestamp_ms()
        score = to_unix_ms(defer_until) if defer_until is not None else now_ms + (to_ms(defer_by) or 0)
        expires_ms = score - now_ms + self._pool.expires_extra_ms
        job = serialize_job(function, (), kwargs, None, now_ms, serializer=self._pool.job_serializer)
        return ([job_key_prefix + job_id, result_key_prefix + job_id, self._queue_name],
                [expires_ms, job, score, job_id])

    async def exists(self, job_id: str) -> bool:
        return bool(await self._pool.exists(job_key_prefix + job_id, in_progress_key_prefix + job_id))

    async def pending_count(self) -> int:
        return int(await self._pool.zcard(self._queue_name))
