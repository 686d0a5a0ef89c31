"""Adapter: queue an arq job in the same atomic step as setting first-seen markers.

Written against arq 0.28.0 (`ARQ_VERSION`). A mention's first-seen markers (its Slack event id,
its channel and ts) and its answer job must be one step: a delivery marked seen without its job
would never be answered, and a job queued without its markers would be answered twice when
Slack retries. arq's public `ArqRedis.enqueue_job` runs its own WATCH/MULTI transaction and
takes no extra keys, so this module writes what `enqueue_job` writes — the job key (PSETEX,
expiring at the job's start plus `expires_extra_ms`), the queue entry (ZADD, scored at the start
time), refusing if the job or its kept result exists — in one Lua script behind the markers,
with arq's own `serialize_job` and key prefixes.

What upstream would need to remove it: a way to add commands to `enqueue_job`'s transaction
(e.g. a `pipeline` hook or an `_extra_keys`/`_condition` argument), or an `enqueue_job` that
accepts a caller's pipeline. tests/test_jobs.py compares what this writes with what arq's
`enqueue_job` writes, key by key, and names the arq version this was checked against: an arq
upgrade that changes the job layout fails there first.

Every other enqueue goes through arq's `enqueue_job` (infra/jobs.py).
"""

from __future__ import annotations

from typing import Any

from arq.connections import ArqRedis
from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms

ARQ_VERSION = "0.28.0"

# Every marker (KEYS[4..], kept ARGV[5] seconds) is set; the job is queued only if none was set
# before, and then only if neither the job (KEYS[1]) nor its kept result (KEYS[2]) exists — arq's
# own check. KEYS[3] is the queue. ARGV: expiry (ms), serialized job, score, job id.
# Returns k > 0 when marker k had been seen, -1 when the job exists, 0 when it was queued.
_QUEUE_BEHIND_MARKERS = """
local seen = 0
for i = 4, #KEYS do
  if not redis.call('SET', KEYS[i], '1', 'NX', 'EX', ARGV[5]) and seen == 0 then seen = i - 3 end
end
if seen > 0 then return seen end
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return -1 end
redis.call('PSETEX', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return 0
"""


async def enqueue_behind_markers(pool: ArqRedis, queue_name: str, function: str, kwargs: dict[str, Any], *,
                                 job_id: str, markers: list[str], marker_ttl: int) -> int:
    """0: queued now; k > 0: markers[k - 1] had been seen (nothing queued); -1: the job exists."""
    now_ms = timestamp_ms()
    job = serialize_job(function, (), kwargs, None, now_ms, serializer=pool.job_serializer)
    keys = [job_key_prefix + job_id, result_key_prefix + job_id, queue_name, *markers]
    args: list[Any] = [pool.expires_extra_ms, job, now_ms, job_id, marker_ttl]
    script = pool.register_script(_QUEUE_BEHIND_MARKERS)  # EVALSHA, loading the script on a miss
    return int(await script(keys=keys, args=args))
