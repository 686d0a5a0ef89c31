"""The durable job queue (arq on Redis), typed.

A job is declared once, as a `JobSpec`: its name on the queue, its arguments (a frozen dataclass),
how long a try may run and how many tries arq gives it. The modules that enqueue it import the spec
(`JobQueue.enqueue(spec, args, ...)` takes only that spec's argument type); the worker binds a
function to it (`spec.bind`) and registers what it bound, so a job name is written in one place and
a misspelt or mistyped argument is a type error, not a job that fails on the worker.

Jobs carry deterministic ids, so enqueueing the same work twice — a retried request, a second
replica, a restarted worker — is a no-op (arq refuses a job id whose job or kept result exists).
On the wire a job's arguments are arq keyword arguments, one per dataclass field, as before the
specs existed: jobs queued by an older process still run.

A job says how it ended with a `JobOutcome` (ok, skipped, stopped, failed, retry, refused, and a
reason), not a free string, so a misspelt kind is a type error; arq keeps it as the same text the
jobs returned before outcomes were typed (`JobOutcome.stored`, applied once, at the arq boundary).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix
from arq.jobs import DeserializationError, Job
from arq.typing import WorkerCoroutine

from infra.arq_enqueue_adapter import enqueue_behind_markers

QUEUE_NAME = "arq:queue:tpubot"
# A job's tries unless its spec says otherwise: a busy channel, a transient error, an alert whose
# thread is being opened each ask arq for another, with a back-off that grows to a minute.
MAX_TRIES = 20


class DataclassArgs(Protocol):
    """What a job's arguments are: a dataclass (frozen, checked by JobSpec)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


Args = TypeVar("Args", bound=DataclassArgs)
Ctx = TypeVar("Ctx")  # what the worker hands its jobs (bot/arq_worker_adapter.py's WorkerContext)


class Outcome(StrEnum):
    """How a job ended, as a kind."""

    OK = "ok"  # it did its work (its reason, if any, says what: "deleted qr-1", "opened")
    SKIPPED = "skipped"  # nothing to do: the work was already done, or is no longer wanted
    STOPPED = "stopped"  # a chain of jobs (watch, boot, idle checks) ended: its lease changed or went
    FAILED = "failed"  # the work could not be done (and whom it concerns was told)
    RETRY = "retry"  # not done yet: the job queued itself again
    REFUSED = "refused"  # the action it ran said no (denied, or could not answer)


@dataclass(frozen=True)
class JobOutcome:
    """What a job returns: its kind and why. `stored()` is the text arq keeps for it.

    The text is the kind, or "kind: reason" ("failed: model key", "stopped: lease changed"); an
    OK outcome's reason is the whole text ("deleted qr-1"), and so is a `bare` one's — the words
    some jobs have always stored alone ("timeout", "not-a-member"), kept so for whoever reads them.
    """

    outcome: Outcome
    reason: str = ""
    bare: bool = False

    @classmethod
    def ok(cls, note: str = "") -> JobOutcome:
        return cls(Outcome.OK, note)

    @classmethod
    def skipped(cls, reason: str, *, bare: bool = False) -> JobOutcome:
        return cls(Outcome.SKIPPED, reason, bare)

    @classmethod
    def stopped(cls, reason: str) -> JobOutcome:
        return cls(Outcome.STOPPED, reason)

    @classmethod
    def failed(cls, reason: str = "", *, bare: bool = False) -> JobOutcome:
        return cls(Outcome.FAILED, reason, bare)

    @classmethod
    def retry(cls, reason: str) -> JobOutcome:
        return cls(Outcome.RETRY, reason)

    @classmethod
    def refused(cls, reason: str = "") -> JobOutcome:
        return cls(Outcome.REFUSED, reason)

    def stored(self) -> str:
        if not self.reason:
            return self.outcome.value
        if self.bare or self.outcome is Outcome.OK:
            return self.reason
        return f"{self.outcome.value}: {self.reason}"

    def __str__(self) -> str:
        return self.stored()


@dataclass(frozen=True)
class JobSpec(Generic[Args]):
    """One kind of job: `name` is what arq stores and the worker looks up; `args` its arguments;
    `timeout` how long one try may run (None: the worker's JOB_TIMEOUT)."""

    name: str
    args: type[Args]
    timeout: timedelta | None = None
    max_tries: int = MAX_TRIES

    def __post_init__(self) -> None:
        params = self.args.__dict__.get("__dataclass_params__")
        if params is None or not params.frozen:
            raise TypeError(f"job {self.name}: its arguments must be a frozen dataclass, not {self.args!r}")

    def to_kwargs(self, args: Args) -> dict[str, Any]:
        """The arq keyword arguments (shallow: a field holding a list of dicts stays that list)."""
        if type(args) is not self.args:
            raise TypeError(f"job {self.name} takes {self.args.__name__}, not {type(args).__name__}")
        return {field.name: getattr(args, field.name) for field in dataclasses.fields(args)}

    def from_kwargs(self, kwargs: dict[str, Any]) -> Args:
        return self.args(**kwargs)

    def bind(self, run: Callable[[Ctx, Args], Awaitable[JobOutcome]]) -> BoundJob[Ctx, Args]:
        return BoundJob(self, run)


@dataclass(frozen=True)
class BoundJob(Generic[Ctx, Args]):
    """A spec with the worker function that runs it: what the worker calls with its context and the
    job's keyword arguments."""

    spec: JobSpec[Args]
    run: Callable[[Ctx, Args], Awaitable[JobOutcome]]

    async def __call__(self, ctx: Ctx, **kwargs: Any) -> str:
        """Run the job; arq gets its outcome as text (`JobOutcome.stored`), never the object.

        arq pickles a job's result into Redis (`arq:result:ID`, kept an hour) and whoever reads it
        unpickles it: a worker of another version (during a rolling deploy, or the one that takes
        over after a failover) or a tool. A pickled `JobOutcome` is readable only where this class
        exists with the same fields; a string is readable by any version of us, and it is the same
        string the jobs returned before outcomes were typed, so old and new results read alike.
        arq also logs the result's repr, which stays the same line. The conversion is here (and in
        `cron_body` for cron jobs) and nowhere else: no job converts its own outcome.
        """
        return (await self.run(ctx, self.spec.from_kwargs(kwargs))).stored()


def describe_failure(error: BaseException) -> str:
    """A job's exception in words for people (cards, logs): its type and message, or what a bare
    timeout means (arq cancels a job at JOB_TIMEOUT and keeps a message-less TimeoutError)."""
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)) and not str(error).strip():
        return "it ran past JOB_TIMEOUT"
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def cron_body(run: Callable[..., Awaitable[JobOutcome]]) -> WorkerCoroutine:
    """A cron job's function as arq runs it: its outcome kept as text, as `BoundJob` keeps a queued
    job's (the same reasons). It keeps the function's name, which arq names the cron job after."""

    @functools.wraps(run)
    async def body(ctx: dict, *args: Any, **kwargs: Any) -> str:
        return (await run(ctx, *args, **kwargs)).stored()

    return body


class JobQueue:
    def __init__(self, pool: ArqRedis, queue_name: str = QUEUE_NAME) -> None:
        self._pool = pool
        self._queue_name = queue_name

    async def enqueue(
        self,
        spec: JobSpec[Args],
        args: Args,
        *,
        job_id: str,
        defer_until: datetime | None = None,
        defer_by: timedelta | None = None,
    ) -> bool:
        """True if this call queued the job, False if a job with this id (or its kept result) exists."""
        if defer_until and defer_by:
            raise ValueError("use either defer_until or defer_by, not both")
        job = await self._pool.enqueue_job(spec.name, _job_id=job_id, _queue_name=self._queue_name,
                                           _defer_until=defer_until, _defer_by=defer_by, **spec.to_kwargs(args))
        return job is not None

    async def enqueue_first_delivery(self, spec: JobSpec[Args], args: Args, *, job_id: str, markers: list[str],
                                     marker_ttl: int) -> int:
        """Queue the job unless one of the first-seen `markers` (Redis keys) was set before; all
        are set in the same atomic step, so a delivery is never marked seen without its job.

        0: queued; k > 0: markers[k - 1] had been seen; -1: the job already exists.
        """
        return await enqueue_behind_markers(self._pool, self._queue_name, spec.name, spec.to_kwargs(args),
                                            job_id=job_id, markers=markers, marker_ttl=marker_ttl)

    async def exists(self, job_id: str) -> bool:
        return bool(await self._pool.exists(job_key_prefix + job_id, in_progress_key_prefix + job_id))

    async def failure(self, job_id: str) -> str | None:
        """Why the job failed, when arq kept a failed result for it: it raised, ran past its
        timeout or ran out of tries. None while it has no result, or when it returned (whatever
        its outcome: a job that returns has said what happened itself)."""
        try:
            info = await Job(job_id, self._pool, self._queue_name).result_info()
        except DeserializationError:  # an exception class this version cannot rebuild
            return "an error this version of tpubot cannot read back"
        if info is None or info.success:
            return None
        return describe_failure(info.result) if isinstance(info.result, BaseException) else str(info.result)

    async def pending_count(self) -> int:
        return int(await self._pool.zcard(self._queue_name))
