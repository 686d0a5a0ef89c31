"""The durable job queue (arq on Redis). Jobs carry deterministic ids, so enqueueing the same
work twice — a retried request, a second replica, a restarted worker — is a no-op."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from arq.connections import ArqRedis

QUEUE_NAME = "arq:queue:tpubot"


class JobQueue:
    def __init__(self, pool: ArqRedis, queue_name: str = QUEUE_NAME) -> None:
        self._pool = pool
        self._queue_name = queue_name

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
        job = await self._pool.enqueue_job(
            function,
            _job_id=job_id,
            _queue_name=self._queue_name,
            _defer_until=defer_until,
            _defer_by=defer_by,
            **kwargs,
        )
        return job is not None

    async def exists(self, job_id: str) -> bool:
        from arq.constants import job_key_prefix, in_progress_key_prefix

        return bool(await self._pool.exists(job_key_prefix + job_id, in_progress_key_prefix + job_id))

    async def pending_count(self) -> int:
        return int(await self._pool.zcard(self._queue_name))
