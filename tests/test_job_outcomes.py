"""infra/jobs.py: a job's outcome is typed (`JobOutcome`), and kept by arq as the text it always was
(issue 30). Results stay strings in Redis so a worker of either version reads the other's."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from arq.connections import RedisSettings
from arq.cron import cron
from arq.jobs import Job
from arq.worker import Worker

from agent.lease.zone_search import SearchStatus
from bot.wiring import arq_pool
from infra.jobs import JobOutcome, JobQueue, JobSpec, Outcome, cron_body
from infra.metrics import Metrics
from infra.state.leases import LeaseState

QUEUE = "arq:queue:test-job-outcomes"
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("outcome", "stored"), [
    (JobOutcome.ok(), "ok"),
    (JobOutcome.ok("deleted qr-1"), "deleted qr-1"),  # a success says what it did, alone
    (JobOutcome.ok("watching: ACTIVE"), "watching: ACTIVE"),
    (JobOutcome.failed("model key"), "failed: model key"),
    (JobOutcome.failed(), "failed"),
    (JobOutcome.stopped("lease changed"), "stopped: lease changed"),
    (JobOutcome.skipped("lease gone"), "skipped: lease gone"),
    (JobOutcome.retry("channel busy"), "retry: channel busy"),
    (JobOutcome.refused(), "refused"),
    (JobOutcome.failed("timeout", bare=True), "timeout"),  # the words some jobs always stored alone
    (JobOutcome.skipped("not-a-member", bare=True), "not-a-member"),
    # reasons taken from an enum keep the enum's text
    (JobOutcome.failed(SearchStatus.EXHAUSTED.value), "failed: exhausted"),
    (JobOutcome.stopped(LeaseState.FAILED.value), "stopped: FAILED"),
])
def test_each_kind_is_stored_as_the_text_it_always_was(outcome: JobOutcome, stored: str):
    assert outcome.stored() == stored
    assert str(outcome) == stored


def test_the_kind_is_kept_apart_from_the_text():
    assert JobOutcome.failed("model key") == JobOutcome(Outcome.FAILED, "model key")
    assert JobOutcome.failed("timeout", bare=True).outcome is Outcome.FAILED
    assert JobOutcome.ok("deleted qr-1").outcome is Outcome.OK
    assert JobOutcome.failed("model key") != "failed: model key"  # compare outcomes, or their stored text
    with pytest.raises(ValueError):
        Outcome("faild")


@dataclass(frozen=True)
class Gone:
    lease_id: str = ""


GONE = JobSpec("check_gone", Gone)


@pytest.fixture
async def pool(redis_url):
    arq = await arq_pool(redis_url)
    yield arq
    await arq.aclose()


async def test_a_bound_job_outcome_is_kept_in_redis_as_its_text(pool, redis_url):
    from bot.arq_worker_adapter import WorkerContext, keep_worker_context
    from bot.worker import registered

    async def check(ctx: dict, job: Gone) -> JobOutcome:
        return JobOutcome.stopped("lease gone")

    async def startup(ctx: dict) -> None:
        # what counted() reads
        keep_worker_context(ctx, WorkerContext(services=SimpleNamespace(metrics=Metrics()), slack=None, incidents=None))

    queue = JobQueue(pool, queue_name=QUEUE)
    assert await queue.enqueue(GONE, Gone("L-1"), job_id="gone:L-1")
    # The worker registers it as bot/worker.py does: counted, around the bound job.
    worker = Worker(functions=[registered(GONE.bind(check))], redis_settings=RedisSettings.from_dsn(redis_url),
                    queue_name=QUEUE, burst=True, poll_delay=0.01, handle_signals=False, on_startup=startup)
    try:
        await worker.main()
    finally:
        await worker.close()
    info = await Job("gone:L-1", pool, _queue_name=QUEUE).result_info()
    assert info is not None and info.success
    assert type(info.result) is str and info.result == "stopped: lease gone"
    # What is pickled names no class of ours: a worker without JobOutcome (an older one) reads it.
    raw = await pool.get(b"arq:result:gone:L-1")
    assert raw and b"JobOutcome" not in raw and b"infra.jobs" not in raw


async def skip_reconcile(ctx: dict) -> JobOutcome:
    return JobOutcome.skipped("another reconcile pass is running")


async def test_a_cron_body_keeps_its_name_and_returns_the_text(tmp_path, monkeypatch):
    from bot import alert_jobs
    from bot.settings import Settings

    body = cron_body(skip_reconcile)
    assert cron(body, second={0}).name == "cron:skip_reconcile"  # arq names a cron job after its function
    assert await body({}) == "skipped: another reconcile pass is running"
    monkeypatch.chdir(tmp_path)  # no stray tpu.env
    settings = Settings.load(tmp_path / "none.env", redis_url="redis://127.0.0.1:1/0")
    # The worker's cron jobs keep the names (and so the job ids) they had before outcomes were typed.
    assert {job.name for job in alert_jobs.cron_jobs(settings)} == {"cron:reconcile_gcp", "cron:budget_alerts"}


MISSPELT = """
from infra.jobs import JobOutcome, Outcome

JobOutcome.faild("model key")
JobOutcome(Outcome.FAILD, "model key")
JobOutcome.failed(3)
"""


def test_a_misspelt_kind_is_a_type_error(tmp_path):
    snippet = tmp_path / "misspelt.py"
    snippet.write_text(MISSPELT)
    mypy = Path(sys.executable).with_name("mypy")
    if not mypy.exists():
        pytest.fail("mypy is not installed beside the interpreter; install the dev extra: pip install -e '.[dev]'")
    # The project's settings and cache (pyproject.toml), on this one file.
    result = subprocess.run([str(mypy), str(snippet)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    assert '"type[JobOutcome]" has no attribute "faild"' in result.stdout
    assert '"type[Outcome]" has no attribute "FAILD"' in result.stdout
    assert 'incompatible type "int"' in result.stdout
