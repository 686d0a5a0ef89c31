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
_ENQUEUE = """
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return 0 end
redis.call('PSETEX', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return 1
"""


class JobQueue:
    def __init__(self, pool: ArqRedis, queue_name: str = QUEUE_NAME) -> None:
        self._pool = pool
        self._queue_name = queue_name
        self._enqueue = pool.register_script(_ENQUEUE)

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
        if defer_until and defer_by:
            raise ValueError("use either defer_until or defer_by, not both")
        now_ms = timestamp_ms()
        score = to_unix_ms(defer_until) if defer_until is not None else now_ms + (to_ms(defer_by) or 0)
        expires_ms = score - now_ms + self._pool.expires_extra_ms
        job = serialize_job(function, (), kwargs, None, now_ms, serializer=self._pool.job_serializer)
        queued = await self._enqueue(
            keys=[job_key_prefix + job_id, result_key_prefix + job_id, self._queue_name],
            args=[expires_ms, job, score, job_id],
        )
        return bool(queued)

    async def exists(self, job_id: str) -> bool:
        return bool(await self._pool.exists(job_key_prefix + job_id, in_progress_key_prefix + job_id))

    async def pending_count(self) -> int:
        return int(await self._pool.zcard(self._queue_name))
